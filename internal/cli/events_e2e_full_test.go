//go:build full

package cli_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEndpointsDeliverKilledWithKillNineRedeliversWithTheSameIDAndLosesNothing
// SIGKILLs `msgq endpoints deliver --follow` while its POSTs are in flight
// (the application received them and has not answered): those events were
// never recorded, so a later deliver sends them again, with the same
// webhook-id; every message's event arrives, none is lost.
func TestEndpointsDeliverKilledWithKillNineRedeliversWithTheSameIDAndLosesNothing(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		const n = 40
		e, _ := setupDrainEnv(t, kind, simOnly, n)
		app := newAppEndpoint(t)
		epID, _ := addEndpoint(t, e, app)
		e.run("drain")
		rows := e.rows()
		if len(rows) != n {
			t.Fatalf("%d rows, want %d", len(rows), n)
		}

		// A first pass delivers some; then the application stops answering.
		app.mu.Lock()
		app.holdAfter = 10
		app.mu.Unlock()
		deliver := e.cmd("endpoints", "deliver", "--follow", "--concurrency", "4", "--timeout", "5s", "--lease", "8s",
			"--backoff-base", "100ms", "--backoff-cap", "100ms")
		if err := deliver.Start(); err != nil {
			t.Fatal(err)
		}
		var inFlight []string
		for len(inFlight) < 4 {
			select {
			case id := <-app.held:
				inFlight = append(inFlight, id)
			case <-time.After(time.Minute):
				t.Fatalf("liveness: only %d deliveries in flight after a minute", len(inFlight))
			}
		}
		_ = deliver.Process.Signal(syscall.SIGKILL)
		_ = deliver.Wait()
		app.mu.Lock()
		app.holdAfter = 0
		app.mu.Unlock()

		// Cron-style delivers until the backlog is empty (the killed
		// process's leases must end first).
		for deadline := time.Now().Add(2 * time.Minute); ; {
			e.run("endpoints", "deliver", "--timeout", "5s", "--lease", "8s")
			var eps []struct{ Pending, Dead, Delivered int }
			if err := json.Unmarshal([]byte(e.run("endpoints", "list", "-o", "json")), &eps); err != nil {
				t.Fatal(err)
			}
			if len(eps) != 1 {
				t.Fatalf("endpoints %+v", eps)
			}
			if eps[0].Pending == 0 {
				if eps[0].Dead != 0 || eps[0].Delivered != n {
					t.Fatalf("endpoint %+v, want all %d delivered, none dead", eps[0], n)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("liveness: %+v still pending after two minutes", eps[0])
			}
			time.Sleep(200 * time.Millisecond)
		}

		app.mu.Lock()
		defer app.mu.Unlock()
		count := map[string]int{}
		for _, id := range app.ids {
			count[id]++
		}
		for _, id := range inFlight {
			if count[id] < 2 {
				t.Errorf("event %s was in flight when its deliverer was killed but arrived %d time(s); want it again with the same webhook-id", id, count[id])
			}
		}
		got := map[string]bool{}
		for _, m := range app.msgs {
			got[m] = true
		}
		for _, r := range rows {
			if ts := app.types[r.ID]; len(ts) == 0 || ts[0] != "message.sent" {
				t.Errorf("message %s got %v, want message.sent", r.ID, ts)
			}
			if !got[r.ID] {
				t.Errorf("message %s (%s): its event never arrived", r.ID, r.Key)
			}
		}
		if len(count) != n {
			t.Errorf("%d distinct webhook-ids, want %d (one event per message)", len(count), n)
		}
		if !strings.HasPrefix(epID, "ep_") {
			t.Errorf("endpoint id %q", epID)
		}
	})
}
