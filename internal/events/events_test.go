package events_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/events"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

func TestSignaturesVerifyWithTheOfficialLibrary(t *testing.T) {
	t.Parallel()
	secret, err := events.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_1","type":"message.sent","timestamp":"2026-12-03T10:00:00Z","data":{}}`)
	h := http.Header{}
	if err := events.SetHeaders(h, secret, "evt_1", time.Now(), body); err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, h); err != nil {
		t.Fatalf("the official library refuses our signature: %v", err)
	}
	if err := wh.Verify(append(body[:len(body)-1:len(body)-1], ' ', '}'), h); err == nil {
		t.Error("a changed body verified")
	}
	other, _ := events.NewSecret()
	wo, _ := standardwebhooks.NewWebhook(other)
	if err := wo.Verify(body, h); err == nil {
		t.Error("another secret verified")
	}
}

// stores runs f on a fresh SQLite store and a fresh PostgreSQL one.
func stores(t *testing.T, f func(t *testing.T, s store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := os.Getenv("MSGQ_TEST_POSTGRES_URL")
		if url == "" {
			// A clean clone with nothing but Go runs the SQLite half;
			// CI must run both (as internal/store/postgres's tests do).
			if os.Getenv("CI") != "" {
				t.Fatal("MSGQ_TEST_POSTGRES_URL is not set: PostgreSQL tests must not skip in CI")
			}
			t.Skip("MSGQ_TEST_POSTGRES_URL is not set")
		}
		b := make([]byte, 8)
		rand.Read(b)
		schema := "msgq_events_" + hex.EncodeToString(b)
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), url)
			if err != nil {
				t.Errorf("drop schema: %v", err)
				return
			}
			defer c.Close(context.Background())
			if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
				t.Errorf("drop schema: %v", err)
			}
		})
		s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
}

// receiver is an application's endpoint: it verifies every delivery
// with the official Standard Webhooks library and keeps what it got.
type receiver struct {
	t      *testing.T
	wh     *standardwebhooks.Webhook
	mu     sync.Mutex
	got    []received
	status int // what it answers; 0: 204
}

type received struct {
	WebhookID string
	ID        string `json:"id"`
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		MessageID  string `json:"message_id"`
		Key        string `json:"key"`
		State      string `json:"state"`
		ProviderID string `json:"provider_id"`
		To         string `json:"to"`
	} `json:"data"`
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.t.Errorf("delivery does not verify: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var ev received
	if err := json.Unmarshal(body, &ev); err != nil {
		r.t.Errorf("body %s: %v", body, err)
	}
	ev.WebhookID = req.Header.Get("webhook-id")
	r.mu.Lock()
	r.got = append(r.got, ev)
	status := r.status
	r.mu.Unlock()
	if status == 0 {
		status = http.StatusNoContent
	}
	w.WriteHeader(status)
}

func newReceiver(t *testing.T, s store.Store, tenant string) (*receiver, string) {
	t.Helper()
	secret, err := events.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, wh: wh}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	id, _ := events.NewEndpointID()
	if err := s.EndpointAdd(context.Background(), &store.Endpoint{ID: id, Tenant: tenant, URL: srv.URL + "/hooks", Secret: secret}); err != nil {
		t.Fatal(err)
	}
	return r, id
}

func enqueue(t *testing.T, s store.Store, n int, tenant string) []string {
	t.Helper()
	ps := make([]store.EnqueueParams, n)
	for i := range ps {
		ps[i] = storetest.Params(fmt.Sprintf("%s-%03d", tenant, i))
		ps[i].Tenant = tenant
		ps[i].To = fmt.Sprintf("+1555%07d", i)
	}
	res, err := s.MessageEnqueueMany(context.Background(), ps)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.Message.ID
	}
	return ids
}

func drainSim(t *testing.T, s store.Store) {
	t.Helper()
	sm := sim.New(sim.DefaultConfig())
	sum, err := drain.Run(context.Background(), drain.Config{Store: s, Owner: "drain-1", Concurrency: 8,
		Identities: map[string]*drain.Identity{"sim": {Name: "sim", Provider: sm.Provider(), Policy: retry.DefaultPolicy()}}})
	if err != nil || sum.Failed+sum.Unknown != 0 {
		t.Fatalf("drain %+v, %v", sum, err)
	}
}

func TestEventsReachTheEndpointSignedAndInOrderAfterARealDrain(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		r, _ := newReceiver(t, s, "shop")
		ids := enqueue(t, s, 20, "shop")
		quiet := enqueue(t, s, 5, "no-endpoint")
		drainSim(t, s)
		// Half are delivered too, as a webhook's evidence says.
		for _, id := range ids[:10] {
			if _, err := s.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sent,
				Event: state.Event{Kind: state.Evidence, Status: state.Delivered}, Source: store.SourceWebhook}); err != nil {
				t.Fatal(err)
			}
		}
		sum, err := (&events.Dispatcher{Store: s, Owner: "disp-1", Concurrency: 4}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for sum.Delivered < 30 { // the delivered events wait for their sent ones: another pass each
			more, err := (&events.Dispatcher{Store: s, Owner: "disp-1", Concurrency: 4}).Run(ctx)
			if err != nil || more.Claimed == 0 {
				t.Fatalf("dispatch stalled at %+v: %+v, %v", sum, more, err)
			}
			sum.Delivered += more.Delivered
		}
		byMsg := map[string][]string{}
		seen := map[string]bool{}
		for _, ev := range r.got {
			if ev.WebhookID != ev.ID || !strings.HasPrefix(ev.ID, "evt_") || seen[ev.ID] {
				t.Errorf("event %+v: webhook-id must be the event id, each once", ev)
			}
			seen[ev.ID] = true
			byMsg[ev.Data.MessageID] = append(byMsg[ev.Data.MessageID], ev.Type)
			if ev.Data.ProviderID == "" || ev.Data.To == "" || !strings.HasPrefix(ev.Data.Key, "shop-") {
				t.Errorf("event data %+v", ev.Data)
			}
		}
		for i, id := range ids {
			want := "message.sent"
			if i < 10 {
				want += ",message.delivered"
			}
			if got := strings.Join(byMsg[id], ","); got != want {
				t.Errorf("message %d got %q, want %q", i, got, want)
			}
		}
		for _, id := range quiet {
			if len(byMsg[id]) != 0 {
				t.Errorf("a tenant without an endpoint got events for %s", id)
			}
		}
		if len(r.got) != 30 {
			t.Errorf("received %d, want 30", len(r.got))
		}
	})
}

func TestAFailingEndpointIsRetriedThenDeadAndVisible(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		r, epID := newReceiver(t, s, "shop")
		r.status = http.StatusInternalServerError
		enqueue(t, s, 2, "shop")
		drainSim(t, s)
		d := &events.Dispatcher{Store: s, Owner: "disp-1",
			Policy: retry.Policy{Base: time.Millisecond, Factor: 1, Cap: time.Millisecond, MaxAttempts: 3}}
		var dead int
		for deadline := time.Now().Add(time.Minute); dead < 2 && time.Now().Before(deadline); {
			sum, err := d.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			dead += sum.Dead
		}
		eps, err := s.EndpointList(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if dead != 2 || len(eps) != 1 || eps[0].ID != epID || eps[0].Dead != 2 || eps[0].Pending != 0 ||
			eps[0].ConsecutiveFailures != 6 || !strings.HasPrefix(eps[0].LastError, "HTTP 500") || eps[0].LastSuccessAt != nil {
			t.Fatalf("dead %d, endpoints %+v", dead, eps)
		}
		if len(r.got) != 6 {
			t.Errorf("endpoint saw %d attempts, want 3 for each of 2 events", len(r.got))
		}
		// The application is fixed: retry sends the dead events again.
		r.mu.Lock()
		r.status = 0
		r.mu.Unlock()
		if n, err := s.EndpointRetry(ctx, epID); err != nil || n != 2 {
			t.Fatalf("retry %d, %v", n, err)
		}
		sum, err := d.Run(ctx)
		if err != nil || sum.Delivered != 2 {
			t.Fatalf("after retry %+v, %v", sum, err)
		}
		eps, _ = s.EndpointList(ctx, "")
		if eps[0].ConsecutiveFailures != 0 || eps[0].Dead != 0 || eps[0].Delivered != 2 {
			t.Errorf("endpoint after retry %+v", eps[0])
		}
	})
}
