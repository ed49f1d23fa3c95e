package sim_test

import (
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/sim"
)

func TestKindBuildsInProcessOrServed(t *testing.T) {
	none := func(string) string { return "" }
	s, err := sim.Kind.Decode(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.New(none)
	if err != nil || p == nil || !p.Idempotent() {
		t.Fatalf("in process: %T %v", p, err)
	}
	if _, ok := p.(*httpapi.Client); ok {
		t.Error("without base_url the sim is built as an http API client")
	}
	s, err = sim.Kind.Decode(map[string]any{"base_url": "http://127.0.0.1:1", "webhook_secret_env": "W"})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s.New(none); p == nil {
		t.Fatal("nothing built")
	} else if _, ok := p.(*httpapi.Client); !ok {
		t.Errorf("served: built %T, want the http API client", p)
	}
	if e := s.WebhookEnv(); len(e) != 1 || e[0].String() != "W (webhook_secret_env)" || len(s.SendEnv()) != 0 {
		t.Errorf("env %v %v", e, s.SendEnv())
	}
	for raw, want := range map[string]map[string]any{
		"app_secret_env and verify_token_env are for provider whatsapp; provider sim signs with webhook_secret_env": {"app_secret_env": "S"},
		`unknown setting "token_env" for provider sim (known: base_url, webhook_secret_env)`:                        {"token_env": "T"},
	} {
		if _, err := sim.Kind.Decode(want); err == nil || !strings.Contains(err.Error(), raw) {
			t.Errorf("%v: %v, want %q", want, err, raw)
		}
	}
}
