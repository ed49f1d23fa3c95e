package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Two WhatsApp numbers, each on its own simulator: both simulators number
// their messages from wamid.1, as two providers (or a restarted one) do.
const (
	evPhone1 = "106540352250001"
	evPhone2 = "106540352250002"
)

func evidenceConfig(sim1, sim2 string) string {
	return fmt.Sprintf(`identities:
  demo-1:
    provider: whatsapp
    base_url: %s
    phone_number_id: "%s"
    token_env: MSGQ_TEST_TOKEN
    app_secret_env: MSGQ_TEST_APP_SECRET
  demo-2:
    provider: whatsapp
    base_url: %s
    phone_number_id: "%s"
    token_env: MSGQ_TEST_TOKEN
    app_secret_env: MSGQ_TEST_APP_SECRET
`, sim1, evPhone1, sim2, evPhone2)
}

// waInboundBody is a customer's message to the number pnid: a text reply
// to ctxID, or with reaction set, a reaction to it.
func waInboundBody(pnid, id, from, ctxID string, reaction bool, ts int64) []byte {
	msg := fmt.Sprintf(`{"from":%q,"id":%q,"timestamp":"%d","context":{"from":"15550000000","id":%q},"type":"text","text":{"body":"which one?"}}`,
		strings.TrimPrefix(from, "+"), id, ts, ctxID)
	if reaction {
		msg = fmt.Sprintf(`{"from":%q,"id":%q,"timestamp":"%d","type":"reaction","reaction":{"message_id":%q,"emoji":"\ud83d\udc4d"}}`,
			strings.TrimPrefix(from, "+"), id, ts, ctxID)
	}
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":`+
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550000000","phone_number_id":%q},`+
		`"contacts":[{"profile":{"name":"A"},"wa_id":%q}],"messages":[%s]}}]}]}`, pnid, strings.TrimPrefix(from, "+"), msg)
}

func waStatusRefBody(pnid, wamid, status, to, ref string, ts int64) []byte {
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":`+
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550000000","phone_number_id":%q},`+
		`"statuses":[{"id":%q,"status":%q,"timestamp":"%d","recipient_id":%q,"biz_opaque_callback_data":%q}]}}]}]}`,
		pnid, wamid, status, ts, strings.TrimPrefix(to, "+"), ref)
}

// TestEvidenceLandsOnItsOwnMessage (issue 12 §3): two simulators issue the
// same wamids to two identities. Through the real webhook serve, every
// status and every reply lands on its own identity's row: demo-1's rows
// are read (its simulator reports reads), demo-2's stay delivered, however
// the statuses interleave. A status whose biz_opaque_callback_data names
// another message is set aside as suspect and moves nothing; a reaction
// is attributed to the message reacted to (issue 13 §3).
func TestEvidenceLandsOnItsOwnMessage(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, evidenceConfig("http://127.0.0.1:9", "http://127.0.0.1:9"))
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret}}
		e.run("migrate")
		serve, hooks := startServe(t, e, "--poll", "100ms")
		simArgs := []string{"--webhook-url", hooks, "--app-secret-env", "MSGQ_TEST_APP_SECRET", "--status-delay", "50ms"}
		sim1, log1 := startSimProc(t, e, append(simArgs, "--read-after", "50ms")...)
		sim2, log2 := startSimProc(t, e, simArgs...)
		writeFile(t, cfg, evidenceConfig(sim1, sim2))

		type row struct{ key, identity, to string }
		rows := []row{
			{"d1-a", "demo-1", "+15551110001"}, {"d1-b", "demo-1", "+15551110002"},
			{"d2-a", "demo-2", "+15552220001"}, {"d2-b", "demo-2", "+15552220002"},
		}
		for _, r := range rows {
			e.run("send", "--identity", r.identity, "--key", r.key, "--to", r.to, "--template", "order_update")
		}
		e.run("drain")

		st := b.watch(t)
		ctx := context.Background()
		msgs := map[string]*store.Message{}
		wantState := map[string]state.State{"demo-1": state.Read, "demo-2": state.Delivered}
		deadline := time.Now().Add(30 * time.Second)
		for {
			done := true
			for _, r := range rows {
				m, err := st.MessageGet(ctx, store.DefaultTenant, r.key)
				if err != nil {
					t.Fatal(err)
				}
				msgs[r.key] = m
				if m.State != wantState[r.identity] {
					done = false
				}
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				for _, r := range rows {
					t.Errorf("%s: %s", r.key, e.run("show", r.key))
				}
				t.Fatalf("parked: %s\nsuspect: %s\nserve: %s\nsim1: %s\nsim2: %s", e.run("webhook", "parked"), e.run("webhook", "suspect"),
					serve.log.String(), log1.String(), log2.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The test proves something only if the ids really are shared.
		byPID := map[string][]string{}
		for _, r := range rows {
			byPID[msgs[r.key].ProviderID] = append(byPID[msgs[r.key].ProviderID], r.identity)
		}
		shared := 0
		for _, ids := range byPID {
			if len(ids) == 2 && ids[0] != ids[1] {
				shared++
			}
		}
		if shared != 2 {
			t.Fatalf("the simulators did not issue the same ids to both identities: %v", byPID)
		}
		// Long enough for any late read of demo-1 to reach demo-2 wrongly.
		time.Sleep(300 * time.Millisecond)
		for _, r := range rows {
			m, err := st.MessageGet(ctx, store.DefaultTenant, r.key)
			if err != nil {
				t.Fatal(err)
			}
			if m.State != wantState[r.identity] {
				t.Errorf("%s (%s) is %s, want %s", r.key, r.identity, m.State, wantState[r.identity])
			}
			evs, err := st.EvidenceList(ctx, m.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Identity != r.identity || ev.ProviderID != m.ProviderID {
					t.Errorf("%s (%s, %s) carries a status of %s %s", r.key, r.identity, m.ProviderID, ev.Identity, ev.ProviderID)
				}
			}
		}

		// Replies to the shared ids, one through each number, and a
		// reaction; then a status of demo-1's d1-a whose reference names
		// demo-1's d1-b.
		d1a, d1b, d2a, d2b := msgs["d1-a"], msgs["d1-b"], msgs["d2-a"], msgs["d2-b"]
		ts := time.Now().Unix()
		for _, body := range [][]byte{
			waInboundBody(evPhone1, "wamid.in.1", d1a.To, d1a.ProviderID, false, ts),
			waInboundBody(evPhone2, "wamid.in.2", d2a.To, d2a.ProviderID, false, ts),
			waInboundBody(evPhone2, "wamid.in.3", d2b.To, d2b.ProviderID, true, ts),
			waStatusRefBody(evPhone1, d1a.ProviderID, "failed", d1a.To, d1b.ID, ts),
		} {
			if code, err := postSigned(hooks, body); err != nil || code != 200 {
				t.Fatalf("post: %d %v", code, err)
			}
		}
		var box []store.Inbound
		deadline = time.Now().Add(30 * time.Second)
		for {
			if err := json.Unmarshal([]byte(e.run("inbox", "-o", "json")), &box); err != nil {
				t.Fatal(err)
			}
			var sus struct {
				Statuses []store.StatusEvidence `json:"statuses"`
			}
			if err := json.Unmarshal([]byte(e.run("webhook", "suspect", "-o", "json")), &sus); err != nil {
				t.Fatal(err)
			}
			if len(box) == 3 && len(sus.Statuses) == 1 {
				if !strings.Contains(sus.Statuses[0].Suspect, d1b.ID) || sus.Statuses[0].ProviderID != d1a.ProviderID {
					t.Errorf("suspect %+v", sus.Statuses[0])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("inbox %+v, suspects %+v; serve: %s", box, sus, serve.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		want := map[string]string{"wamid.in.1": d1a.ID, "wamid.in.2": d2a.ID, "wamid.in.3": d2b.ID}
		for _, in := range box {
			if in.MessageID == nil || *in.MessageID != want[in.ProviderMessageID] {
				t.Errorf("%s (%s) linked to %v, want %s", in.ProviderMessageID, in.Identity, in.MessageID, want[in.ProviderMessageID])
			}
		}
		for _, m := range []*store.Message{d1a, d1b} {
			if got, _ := st.MessageGet(ctx, "", m.ID); got.State != state.Read {
				t.Errorf("the suspect failed status moved %s to %s", m.Key, got.State)
			}
		}
		// show names what the customer answered, the reaction included.
		var shown struct {
			Inbound []store.Inbound `json:"inbound"`
		}
		if err := json.Unmarshal([]byte(e.run("show", "d2-b", "-o", "json")), &shown); err != nil {
			t.Fatal(err)
		}
		if len(shown.Inbound) != 1 || shown.Inbound[0].Type != "reaction" || shown.Inbound[0].Text != "👍" {
			t.Errorf("show d2-b inbound %+v", shown.Inbound)
		}
		if out := e.run("show", "d2-b"); !strings.Contains(out, "reaction") {
			t.Errorf("show d2-b (table) does not name the reaction:\n%s", out)
		}
	})
}
