package recipient

import (
	"errors"
	"net/mail"
	"testing"

	"github.com/msgq/msgq/internal/phone"
)

func TestNormalizePerChannel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		channel, raw, region, want string
	}{
		{WhatsApp, "+1 555 123 4567", "", "+15551234567"},
		{SMS, "(555) 123-4567", "US", "+15551234567"},
		{Email, "ada@example.com", "", "ada@example.com"},
		{Email, "Ada Lovelace <Ada@Example.COM>", "", "Ada@example.com"},
		{Email, "  ada+orders@mail.example.co.uk ", "", "ada+orders@mail.example.co.uk"},
		{Email, "ada@Bücher.Example", "", "ada@xn--bcher-kva.example"},
		{Email, "ada@xn--bcher-kva.example", "", "ada@xn--bcher-kva.example"},
	} {
		got, err := Normalize(tc.channel, tc.raw, tc.region)
		if err != nil || got != tc.want {
			t.Errorf("Normalize(%s, %q) = %q, %v; want %q", tc.channel, tc.raw, got, err, tc.want)
			continue
		}
		if err := Valid(tc.channel, got); err != nil {
			t.Errorf("Valid(%s, %q): %v", tc.channel, got, err)
		}
		if tc.channel == Email {
			// Go's net/mail reads back what msgq stores.
			if a, err := mail.ParseAddress(got); err != nil || a.Address != got {
				t.Errorf("net/mail reads %q as %v, %v", got, a, err)
			}
		}
	}
}

func TestBadAddressesAreRefusedWithTheirChannelsError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ channel, raw string }{
		{Email, ""}, {Email, "ada"}, {Email, "ada@"}, {Email, "@example.com"}, {Email, "ada@localhost"},
		{Email, "ada@[192.0.2.1]"}, {Email, "ada@example.com\r\nBcc: eve@example.com"}, {Email, "a, b@example.com"},
		{Email, "ada@exa_mple.com"}, {Email, "ada@-example.com"},
		{WhatsApp, "ada@example.com"}, {SMS, "12"}, {"fax", "+15551234567"},
	} {
		_, err := Normalize(tc.channel, tc.raw, "")
		var re *Error
		var pe *phone.Error
		switch {
		case err == nil:
			t.Errorf("Normalize(%s, %q) accepted it", tc.channel, tc.raw)
		case IsPhone(tc.channel) && !errors.As(err, &pe):
			t.Errorf("Normalize(%s, %q): %T %v, want a *phone.Error", tc.channel, tc.raw, err, err)
		case !IsPhone(tc.channel) && !errors.As(err, &re):
			t.Errorf("Normalize(%s, %q): %T %v, want a *recipient.Error", tc.channel, tc.raw, err, err)
		}
	}
	for _, tc := range []struct{ channel, addr string }{
		{WhatsApp, "15551234567"}, {SMS, "+0551234567"}, {Email, "Ada <ada@example.com>"}, {Email, "ada@EXAMPLE.com"},
		{Email, "+15551234567"},
	} {
		if err := Valid(tc.channel, tc.addr); err == nil {
			t.Errorf("Valid(%s, %q) accepted it", tc.channel, tc.addr)
		}
	}
}

func TestMaskHidesMostOfAnAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ channel, addr, want string }{
		{WhatsApp, "+15551234567", "+1555*****67"},
		{Email, "ada@example.com", "a***@example.com"},
		{Email, "élodie@example.com", "é***@example.com"},
		{Email, "x", "*"},
	} {
		if got := Mask(tc.channel, tc.addr); got != tc.want {
			t.Errorf("Mask(%s, %q) = %q, want %q", tc.channel, tc.addr, got, tc.want)
		}
	}
}
