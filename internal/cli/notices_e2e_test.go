package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

func noticesConfig(sim string) string {
	return fmt.Sprintf(`identities:
  shop:
    provider: whatsapp
    base_url: %[1]s
    phone_number_id: "%[2]s"
    token_env: MSGQ_TEST_TOKEN
    app_secret_env: MSGQ_TEST_APP_SECRET
  shop-2:
    provider: whatsapp
    base_url: %[1]s
    phone_number_id: "%[3]s"
    token_env: MSGQ_TEST_TOKEN
    app_secret_env: MSGQ_TEST_APP_SECRET
`, sim, evPhone1, evPhone2)
}

func waChangeBody(field, value string) []byte {
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"100000000000000","time":%d,"changes":[{"field":%q,"value":%s}]}]}`,
		time.Now().Unix(), field, value)
}

func waErrorsBody(pnid string, code int, title string) []byte {
	return waChangeBody("messages", fmt.Sprintf(`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550000000","phone_number_id":%q},`+
		`"errors":[{"code":%d,"title":%q,"message":%q,"error_data":{"details":"d"}}]}`, pnid, code, title, title))
}

// TestNoticesAreRecordedAndActedOn (issue 13 §3): through the real webhook
// serve, on both stores. A template reported PAUSED holds the queued rows
// that use it on both identities of the account (a drain sends only the
// others); APPROVED releases them and they go. An account-level error the
// retry table calls the identity's pauses that identity once (a redelivery
// after an operator resumed it does not); a rate-limit error shows on its
// identity without pausing it; a field msgq does not know is counted and
// listed.
func TestNoticesAreRecordedAndActedOn(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, noticesConfig("http://127.0.0.1:9"))
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret}}
		e.run("migrate")
		serve, hooks := startServe(t, e, "--poll", "100ms")
		sim, simLog := startSimProc(t, e)
		writeFile(t, cfg, noticesConfig(sim))

		e.run("send", "--identity", "shop", "--key", "a", "--to", "+15551110001", "--template", "order_update", "--lang", "en_US")
		e.run("send", "--identity", "shop-2", "--key", "b", "--to", "+15551110002", "--template", "order_update", "--lang", "en_US")
		e.run("send", "--identity", "shop", "--key", "c", "--to", "+15551110003", "--template", "receipt", "--lang", "en_US")

		post := func(body []byte) {
			t.Helper()
			if code, err := postSigned(hooks, body); err != nil || code != 200 {
				t.Fatalf("post: %d %v", code, err)
			}
		}
		var stats store.WebhookStats
		waitStats := func(what string, ok func() bool) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				if err := json.Unmarshal([]byte(e.run("stats", "-o", "json")), &stats); err != nil {
					t.Fatal(err)
				}
				if ok() {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: stats %+v; serve: %s", what, stats, serve.log.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}

		post(waChangeBody("message_template_status_update",
			`{"event":"PAUSED","message_template_id":594425479261596,"message_template_name":"order_update","message_template_language":"en_US","reason":"LOW_QUALITY"}`))
		waitStats("the hold", func() bool { return stats.TemplateHolds == 2 && stats.TemplateHeldRows == 2 })
		var ids []struct {
			Name          string   `json:"name"`
			Paused        bool     `json:"paused"`
			Reason        string   `json:"paused_reason"`
			LastNotice    string   `json:"last_notice"`
			TemplateHolds []string `json:"template_holds"`
		}
		if err := json.Unmarshal([]byte(e.run("identities", "-o", "json")), &ids); err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, id := range ids {
			if len(id.TemplateHolds) == 1 && strings.Contains(id.TemplateHolds[0], "order_update (en_US) PAUSED: 1 held") {
				held++
			}
		}
		if held != 2 {
			t.Errorf("identities do not show the hold: %+v", ids)
		}
		if out := e.run("show", "a"); !strings.Contains(out, store.TemplateHeldError("order_update", "en_US")) {
			t.Errorf("show a does not say it is held:\n%s", out)
		}
		e.run("drain")
		if ds := simDeliveries(t, sim); len(ds) != 1 {
			t.Fatalf("the drain sent %d messages while order_update is paused, want 1 (receipt): %+v\n%s", len(ds), ds, simLog.String())
		}

		post(waChangeBody("message_template_status_update",
			`{"event":"APPROVED","message_template_id":594425479261596,"message_template_name":"order_update","message_template_language":"en_US","reason":"NONE"}`))
		waitStats("the release", func() bool { return stats.TemplateHolds == 0 && stats.TemplateHeldRows == 0 })
		e.run("drain")
		if ds := simDeliveries(t, sim); len(ds) != 3 {
			t.Fatalf("after APPROVED, %d delivered, want 3: %+v", len(ds), ds)
		}

		// Account-level errors.
		locked := waErrorsBody(evPhone1, 131031, "Business Account locked")
		post(locked)
		post(waErrorsBody(evPhone2, 130429, "Rate limit hit"))
		post(waChangeBody("flows", `{"event":"FLOW_STATUS_CHANGE","flow_id":"1"}`))
		waitStats("the notices", func() bool { return stats.Notices == 5 && stats.UnknownNotices == 1 })
		if err := json.Unmarshal([]byte(e.run("identities", "-o", "json")), &ids); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			switch id.Name {
			case "shop":
				if !id.Paused || !strings.Contains(id.Reason, "131031") || !strings.Contains(id.LastNotice, "131031") {
					t.Errorf("shop: %+v, want paused by 131031", id)
				}
			case "shop-2":
				if id.Paused || !strings.Contains(id.LastNotice, "error 130429 Rate limit hit") {
					t.Errorf("shop-2: %+v, want the rate limit shown, not paused", id)
				}
			}
		}
		var unknown []store.Notice
		if err := json.Unmarshal([]byte(e.run("webhook", "notices", "--kind", "unknown", "-o", "json")), &unknown); err != nil {
			t.Fatal(err)
		}
		if len(unknown) != 1 || unknown[0].Field != "flows" || !strings.Contains(unknown[0].Detail, "FLOW_STATUS_CHANGE") {
			t.Errorf("unknown notices %+v", unknown)
		}
		// Meta redelivers the lock after an operator resumed the identity.
		e.run("identities", "resume", "shop")
		post(locked)
		waitStats("the duplicate", func() bool { return stats.DuplicateWebhooks >= 1 })
		if out := e.run("identities", "-o", "json"); strings.Contains(out, `"paused": true`) {
			t.Errorf("a redelivered error paused an identity again:\n%s", out)
		}
	})
}
