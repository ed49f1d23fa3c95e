package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// identitiesConfig: shop is a WhatsApp number on the simulator (WhatsApp's
// default limits apply), texts sends SMS only, api's token is not set in
// the tests' environment, and raw has WhatsApp's limits switched off.
func identitiesConfig(sim string) string {
	return fmt.Sprintf(`identities:
  shop: {provider: whatsapp, base_url: %[1]s, phone_number_id: "1000001", token_env: MSGQ_TEST_TOKEN}
  texts: {provider: sim, channel: sms}
  api: {provider: http, base_url: %[1]s, token_env: MSGQ_TEST_UNSET_TOKEN}
  raw: {provider: whatsapp, base_url: %[1]s, phone_number_id: "1000002", token_env: MSGQ_TEST_TOKEN, rate: "off", per_recipient_interval: "off"}
`, sim)
}

// TestASendToAnIdentityThatIsNotConfiguredIsRefused is the typo of issue
// 13: `send --identity shpo` exited 0 and its row waited forever. Now a
// row's identity must be configured and its channel one its identity
// sends on; pause likewise refuses a name it does not know. Each refusal
// is one line, exit 2, and writes nothing.
func TestASendToAnIdentityThatIsNotConfiguredIsRefused(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e := newOpEnv(t, kind, identitiesConfig("http://127.0.0.1:9"))
		known := `\(known: api, raw, shop, sim, texts\)`
		e.refused(2, `^msgq: identity: "shpo" is not configured `+known+`\n$`,
			"send", "--key", "k1", "--to", "+15551234567", "--text", "hi", "--identity", "shpo")
		e.refused(2, `^msgq: identity: "sh po" is not a valid name \(1 to 64 characters of A-Za-z0-9._:-\)\n$`,
			"send", "--key", "k1", "--to", "+15551234567", "--text", "hi", "--identity", "sh po")
		e.refused(2, `^msgq: channel: identity shop \(provider whatsapp\) does not send on sms \(it sends on whatsapp\)\n$`,
			"send", "--key", "k1", "--to", "+15551234567", "--text", "hi", "--identity", "shop", "--channel", "sms")
		e.refused(2, `^msgq: channel: identity texts \(provider sim\) does not send on whatsapp \(it sends on sms\)\n$`,
			"send", "--key", "k1", "--to", "+15551234567", "--text", "hi", "--identity", "texts", "--channel", "whatsapp")
		e.refused(2, `^msgq: identity: "shpo" is not configured `+known+`\n$`, "identities", "pause", "shpo")
		e.refused(2, `^msgq: identity: "shpo" is not configured `+known+`\n$`, "identities", "resume", "shpo")
		// The default identity is checked like a named one.
		e.env = append(e.env, "MSGQ_DEFAULT_IDENTITY=shpo")
		e.refused(2, `^msgq: identity: "shpo" is not configured `+known+`\n$`,
			"send", "--key", "k1", "--to", "+15551234567", "--text", "hi")
		e.env = e.env[:len(e.env)-1]
		if n := len(e.rows()); n != 0 {
			t.Fatalf("%d rows written by refused sends", n)
		}

		// --channel defaults to the identity's.
		e.run("send", "--key", "to-texts", "--to", "+15551234567", "--text", "hi", "--identity", "texts")
		e.run("send", "--key", "to-shop", "--to", "+15551234567", "--text", "hi", "--identity", "shop")
		e.run("send", "--key", "to-sim-sms", "--to", "+15551234567", "--text", "hi", "--identity", "sim", "--channel", "sms")
		for key, want := range map[string]string{"to-texts": "sms", "to-shop": "whatsapp", "to-sim-sms": "sms"} {
			if got := e.get(key).Channel; got != want {
				t.Errorf("%s: channel %s, want %s", key, got, want)
			}
		}

		// A pause of a configured identity works; resuming a name the
		// store knows (paused, since removed from the config) works too.
		e.run("identities", "pause", "texts")
		e.run("identities", "resume", "texts")
		if err := e.st.IdentityPause(t.Context(), "gone", "test"); err != nil {
			t.Fatal(err)
		}
		e.run("identities", "resume", "gone")

		// A resend goes out through the original's identity: one no
		// longer configured is refused the same way.
		orphan := e.seed("orphan", "gone", "")
		if _, err := e.st.MessageTransition(t.Context(), &store.TransitionParams{ID: orphan.ID, From: state.Queued,
			Event: state.Event{Kind: state.Cancel}, Source: store.SourceOperator}); err != nil {
			t.Fatal(err)
		}
		e.refused(2, `^msgq: identity: "gone" is not configured `+known+`\n$`, "resend", "orphan", "--key", "orphan-r2")
	})
}

// TestIdentityNamesHaveAGrammar: a name with a newline, a control
// character or a space is refused when the config is loaded.
func TestIdentityNamesHaveAGrammar(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, "sqlite", "identities:\n  shop: {provider: sim}\n")
	for _, name := range []string{`"a\nb"`, `"tab\tname"`, `"sh op"`, `"` + strings.Repeat("x", 65) + `"`} {
		cfg := filepath.Join(t.TempDir(), "bad.yaml")
		writeFile(t, cfg, "identities:\n  "+name+": {provider: sim}\n")
		e.refused(2, `^msgq: config: identity .*: names are 1 to 64 characters of A-Za-z0-9._:-\n$`, "identities", "--config", cfg)
	}
}

// TestADrainSendsForTheIdentitiesWhoseTokenItHas: one identity without its
// token no longer stops every drain. The drain skips it with one warning,
// sends the others', and its rows stay queued, visibly: identities says
// it cannot send here, stats counts its queue, health alerts on it. Named
// with --identity, a missing token is still bad input. A drain that has
// the token sends them.
func TestADrainSendsForTheIdentitiesWhoseTokenItHas(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t)
		e := newOpEnv(t, kind, identitiesConfig(sim))
		e.run("send", "--key", "for-shop", "--to", "+15551234567", "--text", "hi", "--identity", "shop")
		e.run("send", "--key", "for-api-1", "--to", "+15551234568", "--text", "hi", "--identity", "api")
		e.run("send", "--key", "for-api-2", "--to", "+15551234569", "--text", "hi", "--identity", "api")

		_, errs, code := e.try("drain")
		if code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		warn := regexp.MustCompile(`(?m)^drain: skipping identity api: MSGQ_TEST_UNSET_TOKEN \(token_env\) not set in this environment; its 2 queued rows stay queued$`)
		if n := len(warn.FindAllString(errs, -1)); n != 1 || strings.Count(errs, "skipping") != 1 || !strings.Contains(errs, "claimed 1, sent 1,") {
			t.Errorf("drain stderr: %q", errs)
		}
		for key, want := range map[string]state.State{"for-shop": state.Sent, "for-api-1": state.Queued, "for-api-2": state.Queued} {
			if got := e.get(key).State; got != want {
				t.Errorf("%s: %s, want %s", key, got, want)
			}
		}
		if n := len(deliveries(t, sim)); n != 1 {
			t.Errorf("%d deliveries, want 1", n)
		}

		var ids []struct {
			Name       string   `json:"name"`
			Configured bool     `json:"configured"`
			SendsHere  bool     `json:"sends_here"`
			MissingEnv []string `json:"missing_env"`
			Queued     int      `json:"queued"`
		}
		e.jsonOut(0, &ids, "identities")
		got := map[string]string{}
		for _, id := range ids {
			got[id.Name] = fmt.Sprintf("%v %v %v %d", id.Configured, id.SendsHere, id.MissingEnv, id.Queued)
		}
		if want := "true false [MSGQ_TEST_UNSET_TOKEN (token_env)] 2"; got["api"] != want {
			t.Errorf("identities: api %q, want %q", got["api"], want)
		}
		if want := "true true [] 0"; got["shop"] != want {
			t.Errorf("identities: shop %q, want %q", got["shop"], want)
		}
		out, _, _ := e.try("identities")
		if !regexp.MustCompile(`(?m)^api +http .* 2 +0 +0 +no +no: MSGQ_TEST_UNSET_TOKEN \(token_env\) unset +-$`).MatchString(out) {
			t.Errorf("identities table:\n%s", out)
		}

		_, errs, code = e.try("health", "--max-unsendable", "0")
		if code != 4 || !strings.Contains(errs, "health: 2 rows queued for identities that cannot send from here: api 2 (MSGQ_TEST_UNSET_TOKEN (token_env) not set) (max 0)") {
			t.Errorf("health --max-unsendable 0: exit %d: %s", code, errs)
		}

		e.refused(2, `^msgq: identity api: environment variable MSGQ_TEST_UNSET_TOKEN \(token_env\) is not set\n$`, "drain", "--identity", "api")

		// A drain with the token sends them; nothing is left for health.
		e.env = append(e.env, "MSGQ_TEST_UNSET_TOKEN=test-token")
		_, errs, code = e.try("drain")
		if code != 0 || strings.Contains(errs, "skipping") || !strings.Contains(errs, "claimed 2, sent 2,") {
			t.Errorf("drain with the token: exit %d: %s", code, errs)
		}
		if n := len(deliveries(t, sim)); n != 3 {
			t.Errorf("%d deliveries, want 3", n)
		}
		if _, errs, code = e.try("health", "--max-unsendable", "0"); code != 0 {
			t.Errorf("health after: exit %d: %s", code, errs)
		}
	})
}

// TestReconcileLooksUpOnlyForIdentitiesWhoseTokenItHas: an unknown row of
// an identity without its token is left with a note (one warning), not a
// refusal of the whole run; an expired lease of that identity is still
// taken over, by what its provider kind does (http dedupes by key).
func TestReconcileLooksUpOnlyForIdentitiesWhoseTokenItHas(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e := newOpEnv(t, kind, identitiesConfig("http://127.0.0.1:9"))
		expired := e.sending("api-expired", "api", 5*time.Millisecond)
		e.unknown("api-unknown", "api", "msg_123", "")

		var res struct {
			Changed []struct {
				Key string `json:"key"`
				To  string `json:"to"`
			} `json:"changed"`
			Unresolved []struct {
				Key  string `json:"key"`
				Note string `json:"note"`
			} `json:"unresolved"`
		}
		stdout, errs, code := e.try("reconcile", "-o", "json")
		if code != 0 {
			t.Fatalf("reconcile: exit %d: %s", code, errs)
		}
		if strings.Count(errs, "reconcile: skipping identity api: MSGQ_TEST_UNSET_TOKEN (token_env) not set in this environment; its unknown rows are not looked up\n") != 1 {
			t.Errorf("reconcile stderr: %q", errs)
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Changed) != 1 || res.Changed[0].Key != "api-expired" || res.Changed[0].To != "queued" {
			t.Errorf("changed: %+v, want api-expired queued again", res.Changed)
		}
		if len(res.Unresolved) != 1 || res.Unresolved[0].Note != "identity api's token is not set here: not looked up" {
			t.Errorf("unresolved: %+v", res.Unresolved)
		}
		if m := e.get(expired.ID); m.State != state.Queued || !m.MaybeSent {
			t.Errorf("api-expired: %s maybe_sent %v, want queued and flagged", m.State, m.MaybeSent)
		}
	})
}

// TestWebhookServeServesTheIdentitiesWhoseSecretsItHas: one identity
// without its webhook secret no longer stops webhook serve: it warns once
// and verifies the others' deliveries.
func TestWebhookServeServesTheIdentitiesWhoseSecretsItHas(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, "sqlite", webhookConfig+`  api:
    provider: http
    base_url: http://127.0.0.1:9
    token_env: MSGQ_TEST_TOKEN
    webhook_secret_env: MSGQ_TEST_UNSET_WEBHOOK_SECRET
`)
	e.env = append(e.env, "MSGQ_TEST_APP_SECRET="+testAppSecret, "MSGQ_TEST_VERIFY_TOKEN=verify")
	p, url := startServe(t, e.msgqEnv)
	code, err := postSigned(url, waStatusBody("wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBIwMDE", "delivered", time.Now().Unix()))
	if err != nil || code != http.StatusOK {
		t.Errorf("a signed WhatsApp delivery: %d %v", code, err)
	}
	resp, err := http.Post(url+"/webhooks/http", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("an unsigned http delivery got 200")
	}
	if err := p.proc.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-p.done
	log := p.log.String()
	if strings.Count(log, "webhook: skipping identity api: MSGQ_TEST_UNSET_WEBHOOK_SECRET (webhook_secret_env) not set in this environment; its deliveries get 401 here, so its provider retries them\n") != 1 {
		t.Errorf("webhook serve stderr: %s", log)
	}
}

// TestWhatsAppIdentitiesGetWhatsAppsLimits: with nothing configured, a
// whatsapp identity keeps to 80/s and one message per 6 s to a recipient
// (shown in identities); off switches them off. Two messages to one
// recipient: a drain sends one and leaves the other queued for its slot.
func TestWhatsAppIdentitiesGetWhatsAppsLimits(t *testing.T) {
	t.Parallel()
	sim := serveSim(t)
	e := newOpEnv(t, "sqlite", fmt.Sprintf(`identities:
  wa: {provider: whatsapp, base_url: %[1]s, phone_number_id: "1000001", token_env: MSGQ_TEST_TOKEN}
  raw: {provider: whatsapp, base_url: %[1]s, phone_number_id: "1000002", token_env: MSGQ_TEST_TOKEN, rate: "off", per_recipient_interval: "off"}
  own: {provider: whatsapp, base_url: %[1]s, phone_number_id: "1000003", token_env: MSGQ_TEST_TOKEN, rate: 20/s, per_recipient_interval: 2s}
`, sim))
	var ids []struct {
		Name                string   `json:"name"`
		Channels            []string `json:"channels"`
		Rate                string   `json:"rate"`
		RateDefault         bool     `json:"rate_default"`
		PerRecipient        string   `json:"per_recipient_interval"`
		PerRecipientDefault bool     `json:"per_recipient_default"`
	}
	e.jsonOut(0, &ids, "identities")
	got := map[string]string{}
	for _, id := range ids {
		got[id.Name] = fmt.Sprintf("%v %s %v %s %v", id.Channels, id.Rate, id.RateDefault, id.PerRecipient, id.PerRecipientDefault)
	}
	for name, want := range map[string]string{
		"wa":  "[whatsapp] 80/s true 6s true",
		"raw": "[whatsapp] off false off false",
		"own": "[whatsapp] 20/s false 2s false",
		"sim": "[whatsapp sms] off false off false",
	} {
		if got[name] != want {
			t.Errorf("identities: %s %q, want %q", name, got[name], want)
		}
	}
	out, _, _ := e.try("identities")
	if !regexp.MustCompile(`(?m)^wa +whatsapp +whatsapp +80/s \(default\) +6s \(default\) `).MatchString(out) {
		t.Errorf("identities table:\n%s", out)
	}

	for _, id := range []string{"wa", "raw"} {
		for i := range 2 {
			e.run("send", "--key", fmt.Sprintf("%s-%d", id, i), "--to", "+15551234567", "--text", "hi", "--identity", id)
		}
	}
	e.run("drain")
	for key, want := range map[string]state.State{"wa-0": state.Sent, "wa-1": state.Queued, "raw-0": state.Sent, "raw-1": state.Sent} {
		if got := e.get(key).State; got != want {
			t.Errorf("%s: %s, want %s", key, got, want)
		}
	}
}
