package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/msgq/msgq/internal/store"
)

// TestServeKilledWithKillNineLosesNoAcknowledgedSend: clients send under
// load while `msgq serve` is killed with kill -9 and started again. A
// client that got no answer sends the same body again with the same key,
// as the contract tells it to. Afterwards every send answered 202 (or,
// retried, 200 Idempotent-Replayed) is in the store with the id it was
// answered with, and each key is one row: no acknowledged send lost, no
// duplicate for a client that retried.
func TestServeKilledWithKillNineLosesNoAcknowledgedSend(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		env := newAPIEnv(t, kind)
		st := env.b.watch(t)
		p1, base1 := startAPI(t, env.e)
		var base atomic.Value
		base.Store(base1)

		const clients = 16
		var (
			mu      sync.Mutex
			acked   = map[string]string{} // key -> the id it was answered with
			retried = map[string]bool{}   // keys sent more than once
			wrong   []string
			sent    atomic.Int64
			stop    atomic.Bool
		)
		client := &http.Client{Timeout: 30 * time.Second}
		post := func(key string, i int) (int, string, bool, error) {
			body := fmt.Sprintf(`{"to":"+1555400%04d","text":"kill %d"}`, i%10000, i)
			req, _ := http.NewRequest(http.MethodPost, base.Load().(string)+"/v1/messages", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+env.shop)
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return 0, "", false, err
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				return 0, "", false, err // the answer was cut off: no answer
			}
			var m struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(raw, &m)
			return resp.StatusCode, m.ID, resp.Header.Get("Idempotent-Replayed") == "true", nil
		}
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					key := fmt.Sprintf("kill-%02d-%05d", c, i)
					for attempt := 0; ; attempt++ {
						if attempt > 0 {
							mu.Lock()
							retried[key] = true
							mu.Unlock()
							time.Sleep(50 * time.Millisecond)
						}
						status, id, replayed, err := post(key, c*100000+i)
						if err != nil {
							if attempt > 1200 { // a minute of no server
								mu.Lock()
								wrong = append(wrong, fmt.Sprintf("%s: no answer after a minute of retries: %v", key, err))
								mu.Unlock()
								return
							}
							continue
						}
						mu.Lock()
						switch {
						case status == http.StatusAccepted && id != "":
							acked[key] = id
						case status == http.StatusOK && replayed && id != "" && attempt > 0:
							// The first try was written but its answer lost.
							acked[key] = id
						default:
							wrong = append(wrong, fmt.Sprintf("%s (try %d): %d, replayed %v", key, attempt+1, status, replayed))
						}
						mu.Unlock()
						sent.Add(1)
						break
					}
				}
			})
		}
		waitFor := func(n int64) {
			for deadline := time.Now().Add(2 * time.Minute); sent.Load() < n; {
				if time.Now().After(deadline) {
					t.Fatalf("only %d sends answered, want %d", sent.Load(), n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		// Kill once sends are flowing: some are in flight at that moment.
		waitFor(clients * 8)
		if err := p1.proc.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p1.done
		atKill := sent.Load()
		p2, base2 := startAPI(t, env.e)
		base.Store(base2)
		// Every client's retry lands on the new server, then some more.
		waitFor(atKill + clients*8)
		stop.Store(true)
		wg.Wait()
		_ = p2.proc.Signal(syscall.SIGTERM)
		if err := <-p2.done; err != nil {
			t.Fatalf("serve after the restart, on SIGTERM: %v: %s", err, p2.log.String())
		}

		mu.Lock()
		defer mu.Unlock()
		for _, w := range wrong {
			t.Error(w)
		}
		rows, err := st.MessageList(context.Background(), &store.ListParams{Tenant: "shop", Limit: 1_000_000})
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string][]string{}
		for _, m := range rows {
			byKey[m.Key] = append(byKey[m.Key], m.ID)
		}
		for key, id := range acked {
			if got := byKey[key]; len(got) != 1 || got[0] != id {
				t.Errorf("send %s was answered with %s; the store holds %v", key, id, got)
			}
		}
		for key, ids := range byKey {
			if len(ids) != 1 {
				t.Errorf("key %s holds %d rows: %v", key, len(ids), ids)
			}
			if _, ok := acked[key]; !ok {
				t.Errorf("key %s is in the store but its client never got an acknowledgement", key)
			}
		}
		t.Logf("%d sends acknowledged (%d retried across the kill), %d rows", len(acked), len(retried), len(rows))
		if len(retried) == 0 {
			t.Errorf("no send was in flight at the kill: the test proved nothing about retries")
		}
	})
}

// TestServeDeliversStatusEvents: `msgq serve` runs the status-event
// dispatcher (unless --events=false): a send posted to the API and sent
// by a drain reaches its tenant's endpoint as a verified message.sent
// event, with no `endpoints deliver` process running.
func TestServeDeliversStatusEvents(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		env := newAPIEnv(t, kind)
		app := newAppEndpoint(t)
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		var added struct{ Secret string }
		if err := json.Unmarshal([]byte(env.e.run("endpoints", "add", "--tenant", "shop", "--url", srv.URL+"/events", "-o", "json")), &added); err != nil {
			t.Fatal(err)
		}
		wh, err := standardwebhooks.NewWebhook(added.Secret)
		if err != nil {
			t.Fatal(err)
		}
		app.mu.Lock()
		app.wh = wh
		app.mu.Unlock()
		p, base := startAPI(t, env.e)
		c := newAPIClient(t, base)
		r := c.post(env.shop, "ev-serve-1", orderBody)
		want(t, "send", r, 202, "")
		id, _ := r.body["id"].(string)
		env.e.run("drain")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			app.mu.Lock()
			types := strings.Join(app.types[id], ",")
			app.mu.Unlock()
			if types == "message.sent" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("events for %s: %q, want message.sent: %s", id, types, p.log.String())
			}
		}
		_ = p.proc.Signal(syscall.SIGTERM)
		if err := <-p.done; err != nil {
			t.Fatalf("serve on SIGTERM: %v: %s", err, p.log.String())
		}
	})
}
