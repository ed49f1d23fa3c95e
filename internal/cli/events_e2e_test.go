package cli_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// appEndpoint is an application's event endpoint: it verifies every
// delivery with the official Standard Webhooks library, keeps the
// webhook-ids and events it got, and, once armed, holds the answers to
// the requests that follow (they are in flight in the deliverer) until
// the deliverer goes away.
type appEndpoint struct {
	t  *testing.T
	mu sync.Mutex
	wh *standardwebhooks.Webhook
	// ids are the webhook-ids in arrival order; msgs the message id of
	// each event by webhook-id; types each message's event types in
	// arrival order.
	ids   []string
	msgs  map[string]string
	types map[string][]string
	// holdAfter, when positive, is how many requests are answered: those
	// after it get no answer, and held is told of each.
	holdAfter int
	held      chan string
}

func (a *appEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	wh := a.wh
	a.mu.Unlock()
	if err := wh.Verify(body, r.Header); err != nil {
		a.t.Errorf("a delivery does not verify with the official library: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			MessageID string `json:"message_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != r.Header.Get("webhook-id") {
		a.t.Errorf("delivery %s (webhook-id %s): %v", body, r.Header.Get("webhook-id"), err)
	}
	a.mu.Lock()
	a.ids = append(a.ids, ev.ID)
	a.msgs[ev.ID] = ev.Data.MessageID
	a.types[ev.Data.MessageID] = append(a.types[ev.Data.MessageID], ev.Type)
	hold := a.holdAfter > 0 && len(a.ids) > a.holdAfter
	a.mu.Unlock()
	if hold {
		a.held <- ev.ID
		<-r.Context().Done() // the deliverer was killed: its connection closed
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func newAppEndpoint(t *testing.T) *appEndpoint {
	return &appEndpoint{t: t, msgs: map[string]string{}, types: map[string][]string{}, held: make(chan string, 16)}
}

// addEndpoint registers app (served by a test server) for the default
// tenant and teaches it the printed secret.
func addEndpoint(t *testing.T, e *msgqEnv, app *appEndpoint) (id, secret string) {
	t.Helper()
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	var added struct{ ID, Secret string }
	if err := json.Unmarshal([]byte(e.run("endpoints", "add", "--url", srv.URL+"/events", "-o", "json")), &added); err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(added.Secret)
	if err != nil {
		t.Fatalf("the printed secret %q is not a Standard Webhooks secret: %v", added.Secret, err)
	}
	app.mu.Lock()
	app.wh = wh
	app.mu.Unlock()
	return added.ID, added.Secret
}

// TestEventsFollowRealWebhooksToTheApplication: rows drained through
// `msgq sim serve`, whose webhooks (signed as the providers sign) reach
// `msgq webhook serve` and settle them delivered, or, for the send whose
// answer was lost, unknown first: the application's endpoint gets each
// change as a verified event, in order per message.
func TestEventsFollowRealWebhooksToTheApplication(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		t0 := time.Now()
		defer func() { t.Logf("took %s", time.Since(t0).Round(time.Millisecond)) }()
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, e2eConfig("http://127.0.0.1:9", "http://127.0.0.1:9"))
		whsec := "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-webhook-key-"+kind))
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_WEBHOOK_SECRET=" + whsec}}
		e.run("migrate")
		app := newAppEndpoint(t)
		addEndpoint(t, e, app)
		_, hooks := startServe(t, e, "--poll", "100ms")
		simArgs := []string{"--webhook-url", hooks, "--app-secret-env", "MSGQ_TEST_APP_SECRET",
			"--webhook-secret-env", "MSGQ_TEST_WEBHOOK_SECRET", "--status-delay", "50ms"}
		sim, _ := startSimProc(t, e, simArgs...)
		lossy, _ := startSimProc(t, e, append(simArgs, "--fault-drop", "1")...)
		writeFile(t, cfg, e2eConfig(sim, lossy))

		want := map[string]string{}
		for i := range 3 {
			k := fmt.Sprintf("ev-api-%d", i)
			e.run("send", "--identity", "api", "--key", k, "--to", fmt.Sprintf("+1555000%04d", i), "--text", "hello")
			want[k] = "^message.sent,message.delivered$"
		}
		e.run("send", "--identity", "lossy", "--key", "ev-lossy", "--to", "+15552000000", "--template", "order_update")
		// Its sent status may settle it before its delivered one does.
		want["ev-lossy"] = "^message.unknown,(message.sent,)?message.delivered$"
		e.run("drain", "--identity", "lossy") // first: its wamid.1 is below the other simulator's
		e.run("drain", "--identity", "api")

		ids := map[string]string{}
		for _, r := range e.rows() {
			ids[r.Key] = r.ID
		}
		start := time.Now()
		defer func() { t.Logf("events arrived in %s", time.Since(start).Round(time.Millisecond)) }()
		for deadline := time.Now().Add(2 * time.Minute); ; {
			e.run("endpoints", "deliver")
			app.mu.Lock()
			done := 0
			for k, w := range want {
				if regexp.MustCompile(w).MatchString(strings.Join(app.types[ids[k]], ",")) {
					done++
				}
			}
			app.mu.Unlock()
			if done == len(want) {
				break
			}
			if time.Now().After(deadline) {
				app.mu.Lock()
				for k, w := range want {
					t.Errorf("%s: events %v, want %s", k, app.types[ids[k]], w)
				}
				app.mu.Unlock()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
