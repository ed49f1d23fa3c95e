package cli_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// startSimProc starts `msgq sim serve` as its own process with e's
// environment (the webhook secrets are read from it) and returns its URL
// and its stderr.
func startSimProc(t *testing.T, e *msgqEnv, args ...string) (string, *syncBuffer) {
	t.Helper()
	p, url := startListener(t, e, "sim: listening on ", append([]string{"sim", "serve", "--addr", "127.0.0.1:0"}, args...)...)
	return url, p.log
}

// e2eConfig has an http identity and a WhatsApp identity on one
// simulator, and a second WhatsApp identity on a simulator that drops
// every answer.
func e2eConfig(sim, lossy string) string {
	return fmt.Sprintf(`identities:
  api:
    provider: http
    base_url: %[1]s
    token_env: MSGQ_TEST_TOKEN
    webhook_secret_env: MSGQ_TEST_WEBHOOK_SECRET
  shop:
    provider: whatsapp
    base_url: %[1]s
    phone_number_id: "%[3]s"
    token_env: MSGQ_TEST_TOKEN
    app_secret_env: MSGQ_TEST_APP_SECRET
  lossy:
    provider: whatsapp
    base_url: %[2]s
    phone_number_id: "106540352240001"
    token_env: MSGQ_TEST_TOKEN
    app_secret_env: MSGQ_TEST_APP_SECRET
`, sim, lossy, testPhoneID)
}

type simDelivery struct {
	Ref, ID, API string
}

func simDeliveries(t *testing.T, base string) []simDelivery {
	t.Helper()
	resp, err := http.Get(base + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ds []simDelivery
	if err := json.NewDecoder(resp.Body).Decode(&ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestSimWebhooksE2E: `msgq sim serve --webhook-url` reports what became
// of the messages a drain sent through it to `msgq webhook serve`, signed
// as the real providers sign, and every row ends delivered by a webhook:
// over the http API and over WhatsApp. A WhatsApp send whose answer the
// simulator dropped leaves its row unknown with no wamid; its statuses
// carry the row id as biz_opaque_callback_data, which settles the row as
// delivered and teaches it its wamid.
func TestSimWebhooksE2E(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		// webhook serve needs only the identities' secrets and numbers;
		// the simulators' URLs are filled in once they listen.
		writeFile(t, cfg, e2eConfig("http://127.0.0.1:9", "http://127.0.0.1:9"))
		whsec := "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-webhook-key-"+kind))
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_WEBHOOK_SECRET=" + whsec}}
		e.run("migrate")
		serve, hooks := startServe(t, e, "--poll", "100ms")

		simArgs := []string{"--webhook-url", hooks, "--app-secret-env", "MSGQ_TEST_APP_SECRET",
			"--webhook-secret-env", "MSGQ_TEST_WEBHOOK_SECRET", "--status-delay", "50ms"}
		sim, simLog := startSimProc(t, e, simArgs...)
		lossy, lossyLog := startSimProc(t, e, append(simArgs, "--fault-drop", "1")...)
		writeFile(t, cfg, e2eConfig(sim, lossy))

		var keys []string
		for i := range 3 {
			k := fmt.Sprintf("e2e-api-%d", i)
			e.run("send", "--identity", "api", "--key", k, "--to", fmt.Sprintf("+1555000%04d", i), "--text", "hello")
			keys = append(keys, k)
		}
		for i := range 3 {
			k := fmt.Sprintf("e2e-shop-%d", i)
			e.run("send", "--identity", "shop", "--key", k, "--to", fmt.Sprintf("+1555100%04d", i), "--template", "order_update")
			keys = append(keys, k)
		}
		e.run("send", "--identity", "lossy", "--key", "e2e-lossy", "--to", "+15552000000", "--template", "order_update")
		keys = append(keys, "e2e-lossy")
		// Both simulators number their messages from 1, over both APIs:
		// draining the http rows first makes the first simulator's wamids
		// start above the lossy one's wamid.1, so no two rows share a
		// provider id (as no two of Meta's wamids ever do).
		for _, id := range []string{"api", "shop", "lossy"} {
			e.run("drain", "--identity", id)
		}

		// What reached the phone, by row id.
		provider := map[string]simDelivery{}
		ids := map[string]bool{}
		for _, base := range []string{sim, lossy} {
			for _, d := range simDeliveries(t, base) {
				provider[d.Ref] = d
				if ids[d.ID] {
					t.Fatalf("two messages have the provider id %s: the test proves nothing", d.ID)
				}
				ids[d.ID] = true
			}
		}

		st := b.watch(t)
		ctx := context.Background()
		rows := map[string]*store.Message{}
		for _, k := range keys {
			m, err := st.MessageGet(ctx, store.DefaultTenant, k)
			if err != nil {
				t.Fatal(err)
			}
			rows[k] = m
		}

		// byWebhook says the row is delivered, and a webhook made it so.
		byWebhook := func(id string) bool {
			m, err := st.MessageGet(ctx, store.DefaultTenant, id)
			if err != nil || m.State != state.Delivered {
				return false
			}
			hist, err := st.MessageHistory(ctx, id)
			if err != nil {
				return false
			}
			return slices.ContainsFunc(hist, func(h store.HistoryEntry) bool {
				return h.Source == store.SourceWebhook && h.To == state.Delivered && h.Applied
			})
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting []string
			for _, k := range keys {
				if !byWebhook(rows[k].ID) {
					waiting = append(waiting, k)
				}
			}
			if len(waiting) == 0 {
				break
			}
			if time.Now().After(deadline) {
				for _, k := range waiting {
					t.Errorf("%s not delivered by webhook: %s", k, e.run("show", k))
				}
				t.Fatalf("webhook serve: %s\nsim: %s\nlossy sim: %s", serve.log.String(), simLog.String(), lossyLog.String())
			}
			time.Sleep(50 * time.Millisecond)
		}

		// Each row must learn the id the simulator gave its message.
		for _, k := range keys {
			var shown struct {
				State      string               `json:"state"`
				ProviderID string               `json:"provider_id"`
				History    []store.HistoryEntry `json:"history"`
			}
			if err := json.Unmarshal([]byte(e.run("show", k, "-o", "json")), &shown); err != nil {
				t.Fatal(err)
			}
			d, ok := provider[rows[k].ID]
			if !ok {
				t.Errorf("%s never reached a simulator", k)
				continue
			}
			if shown.State != "delivered" || shown.ProviderID != d.ID {
				t.Errorf("%s: %s with provider id %q, want delivered with %q", k, shown.State, shown.ProviderID, d.ID)
			}
			if want := map[bool]string{true: "http", false: "whatsapp"}[strings.HasPrefix(k, "e2e-api")]; d.API != want {
				t.Errorf("%s went through the %s API, want %s", k, d.API, want)
			}
			if k == "e2e-lossy" && !slices.ContainsFunc(shown.History, func(h store.HistoryEntry) bool {
				return h.To == state.Unknown && h.Source == store.SourceDrain
			}) {
				t.Errorf("%s: history %+v, want the drain to have marked it unknown first", k, shown.History)
			}
		}
	})
}
