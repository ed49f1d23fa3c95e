package phone

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, region, want string }{
		{"+15551234567", "", "+15551234567"},
		{" +1 (555) 123-4567 ", "", "+15551234567"},
		{"0015551234567", "IL", "+15551234567"},
		{"(555) 123-4567", "US", "+15551234567"},
		{"054-123-4567", "il", "+972541234567"},
		{"+44 7911 123456", "", "+447911123456"},
		{"+972541234567", "US", "+972541234567"},
	} {
		got, err := Normalize(tc.raw, tc.region)
		if err != nil || got != tc.want {
			t.Errorf("Normalize(%q, %q) = %q, %v; want %q", tc.raw, tc.region, got, err, tc.want)
		}
	}
}

func TestNormalizeRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, region, why string }{
		{"", "", "empty"},
		{"5551234567", "", "needs --region"},
		{"5551234567", "XX", "unknown region"},
		{"+1555", "", "too short"},
		{"+15551234567890123", "", "too long"},
		{"+999123456789", "", "country code"},
		{"hello", "US", "invalid phone number"},
	} {
		_, err := Normalize(tc.raw, tc.region)
		var pe *Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), `"`+tc.raw+`"`) {
			t.Errorf("Normalize(%q, %q) err = %v, want one naming the input and saying %q", tc.raw, tc.region, err, tc.why)
		}
	}
}

func TestMask(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"+972541234567": "+9725******67",
		"+15551234567":  "+1555*****67",
		"+1234":         "*****",
	} {
		if got := Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}
