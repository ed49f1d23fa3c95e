package twilio_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestTokenlessClientHasTheKindsProperties: built with a getenv that knows
// nothing (what reconcile asks before it reads a secret), the client is a
// Lookuper, a Finder and a StatusMapper, not idempotent, and makes no
// request: every call fails as the identity's, locally. With only one of
// the two secrets set it is still a configuration error.
func TestTokenlessClientHasTheKindsProperties(t *testing.T) {
	s, err := twilio.Kind.Decode(map[string]any{"base_url": "http://127.0.0.1:1", "account_sid_env": "SID", "auth_token_env": "TOK", "from": "+15005550006"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.New(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	_, looks := p.(provider.Lookuper)
	f, finds := p.(provider.Finder)
	sm, maps := p.(provider.StatusMapper)
	if !looks || !finds || !maps || p.Idempotent() {
		t.Fatalf("tokenless %T: lookuper %v finder %v mapper %v idempotent %v", p, looks, finds, maps, p.Idempotent())
	}
	if _, res := f.Find(context.Background(), &provider.Message{ID: "01J", To: "+15551234567", Payload: store.Payload{Text: "hi"}}, now); res.Class != retry.Identity {
		t.Errorf("tokenless Find: %+v, want a local Identity failure", res)
	}
	if st, ok := sm.StatusState("queued"); !ok || st != state.Sent {
		t.Errorf("StatusState(queued) = %s %v", st, ok)
	}
	if _, err := s.New(func(k string) string {
		if k == "TOK" {
			return "token"
		}
		return ""
	}); err == nil {
		t.Error("a token without an account SID was accepted")
	}
}

// TestAnAPIKeyAuthenticatesTheSends: with api_key_sid_env and
// api_key_secret_env the sends need the account SID and the key, not the
// auth token, which is then the webhooks' alone (none without it); one of
// the key's two settings without the other is refused.
func TestAnAPIKeyAuthenticatesTheSends(t *testing.T) {
	s, err := twilio.Kind.Decode(map[string]any{"account_sid_env": "SID", "api_key_sid_env": "KEY", "api_key_secret_env": "SECRET", "from": "+15005550006"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range s.SendEnv() {
		names = append(names, e.Name)
	}
	if len(names) != 3 || names[0] != "SID" || names[1] != "KEY" || names[2] != "SECRET" {
		t.Errorf("SendEnv %v, want the account SID and the API key", names)
	}
	if w := s.WebhookEnv(); len(w) != 0 {
		t.Errorf("WebhookEnv %v without an auth token, want none", w)
	}
	env := map[string]string{"SID": "AC" + strings.Repeat("0a", 16), "KEY": "SK" + strings.Repeat("0b", 16), "SECRET": "s3cret"}
	p, err := s.New(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("New with an API key: %v", err)
	}
	if str := fmt.Sprint(p); strings.Contains(str, "s3cret") {
		t.Errorf("the client prints its secret: %s", str)
	}
	env["KEY"] = "AC" + strings.Repeat("0b", 16)
	if _, err := s.New(func(k string) string { return env[k] }); err == nil {
		t.Error("an API key SID that is not SK... was accepted")
	}
	for _, raw := range []map[string]any{
		{"account_sid_env": "SID", "api_key_sid_env": "KEY", "from": "+15005550006"},
		{"account_sid_env": "SID", "api_key_secret_env": "SECRET", "auth_token_env": "TOK", "from": "+15005550006"},
		{"account_sid_env": "SID", "from": "+15005550006"},
	} {
		if _, err := twilio.Kind.Decode(raw); err == nil {
			t.Errorf("Decode(%v) accepted", raw)
		}
	}
	// With both, the key sends and the token verifies webhooks.
	s, err = twilio.Kind.Decode(map[string]any{"account_sid_env": "SID", "auth_token_env": "TOK", "api_key_sid_env": "KEY", "api_key_secret_env": "SECRET", "from": "+15005550006"})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.WebhookEnv(); len(w) != 1 || w[0].Name != "TOK" {
		t.Errorf("WebhookEnv %v, want the auth token", w)
	}
	if got := s.SendEnv(); len(got) != 3 || got[1].Name != "KEY" {
		t.Errorf("SendEnv %v, want the API key", got)
	}
}
