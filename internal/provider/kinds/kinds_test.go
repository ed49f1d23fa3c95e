package kinds_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/kinds"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/retry"
)

// TestEveryKindIsComplete: what msgq relies on of every registered kind,
// so that a new one cannot be half wired.
func TestEveryKindIsComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kinds.All {
		t.Run(k.Name, func(t *testing.T) {
			if k.Name == "" || seen[k.Name] {
				t.Fatalf("name %q is empty or taken", k.Name)
			}
			seen[k.Name] = true
			if got, ok := kinds.ByName(k.Name); !ok || got != k {
				t.Errorf("ByName(%q) does not find it", k.Name)
			}
			if len(k.Channels) == 0 {
				t.Error("no channels")
			}
			for _, c := range k.Channels {
				if !recipient.Known(c) {
					t.Errorf("channel %q is not one internal/recipient knows", c)
				}
				if phone := recipient.IsPhone(c); phone != (k.Address == provider.AddressPhone) {
					t.Errorf("channel %q does not take %s addresses", c, k.Address)
				}
			}
			if k.Decode == nil {
				t.Fatal("no Decode")
			}
			_, err := k.Decode(map[string]any{"token_evn": "X"})
			var unknown *provider.UnknownSettingError
			if !errors.As(err, &unknown) || unknown.Key != "token_evn" || !strings.Contains(err.Error(), "token_evn") || strings.Contains(err.Error(), "\n") {
				t.Errorf("a misspelt key: %v, want a one-line error naming token_evn", err)
			}
			if len(k.Codes) == 0 {
				t.Error("no error-code table")
			}
			for _, c := range k.Codes {
				if c.Code == "" || c.Meaning == "" || !slices.Contains(classes, c.Class) {
					t.Errorf("code row %+v is incomplete", c)
				}
			}
			if w := k.Webhook; w != nil {
				if w.Name == "" || w.SecretKey == "" || w.Verifier == nil || w.Parse == nil || len(w.Headers) == 0 {
					t.Errorf("webhook %+v is incomplete", *w)
				}
			}
		})
	}
}

var classes = []retry.Class{retry.Accepted, retry.Transient, retry.RateLimited, retry.Permanent, retry.Identity, retry.Ambiguous}

func TestNamesAndChannelsReadAsMessagesSayThem(t *testing.T) {
	if got := kinds.Names(); got != "whatsapp, http, sim, twilio or smtp" {
		t.Errorf("Names() = %q", got)
	}
	if got := kinds.OrList(kinds.Channels()); got != "whatsapp, sms or email" {
		t.Errorf("channels %q", got)
	}
	if _, ok := kinds.ByName("carrier-pigeon"); ok {
		t.Error("ByName found a kind that is not registered")
	}
}

// TestFormatsAreTheWebhookNamesOnce: replay's --provider values and the
// processor's dispatch come from here.
func TestFormatsAreTheWebhookNamesOnce(t *testing.T) {
	if got := kinds.OrList(kinds.Formats()); got != "whatsapp, http or twilio" {
		t.Errorf("Formats() = %q (the simulator speaks http's; smtp sends none)", got)
	}
	for _, f := range kinds.Formats() {
		k := kinds.ByFormat(f)
		if k == nil || k.Webhook == nil || k.Webhook.Name != f {
			t.Fatalf("ByFormat(%q) = %v", f, k)
		}
	}
	if k := kinds.ByFormat("http"); k.Name != "http" {
		t.Errorf("ByFormat(http) = kind %s, want the http API's own (the first that speaks it)", k.Name)
	}
	for _, f := range []string{"smtp", "sim", ""} {
		if k := kinds.ByFormat(f); k != nil {
			t.Errorf("ByFormat(%q) = kind %s, want none", f, k.Name)
		}
	}
}
