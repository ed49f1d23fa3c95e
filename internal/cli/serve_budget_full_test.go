//go:build full

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServeHoldsBoundedMemoryUnder300LargeSends: the chaos scenario of
// issue 24, against a real `msgq serve` built as it is released (the race
// detector would multiply its memory) on SQLite with its defaults: 300
// clients at once each send a valid 1 MiB send (--max-body) with its own
// key. Before the budget this took serve to 1,715 MiB. Now each is
// answered 202, or 503 busy with Retry-After, unread, and sent again after
// it with the same key, until all 300 are durable; serve's peak RSS stays
// under 160 MiB all along.
func TestServeHoldsBoundedMemoryUnder300LargeSends(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 300 MiB of sends")
	}
	// Not parallel: it writes 300 MiB through SQLite's fsyncs, which on a
	// 2-core machine starves the other process tests' busy timeouts, and
	// they would disturb what it measures. It runs before the parallel
	// tests start.
	env := newAPIEnv(t, "sqlite")
	env.e.bin = buildMsgq(t)
	// serve's own defaults: neither inherited from the test's environment.
	env.e.env = append(env.e.env, "GOGC=", "GOMEMLIMIT=")
	p, base := startAPI(t, env.e)
	pid := p.proc.Pid
	idle := peakRSS(t, pid)

	const clients = 300
	body := sendOfSize(1 << 20)
	var (
		mu               sync.Mutex
		busy, transports int
		faults           []string
		wg               sync.WaitGroup
	)
	fault := func(msg string) {
		mu.Lock()
		faults = append(faults, msg)
		mu.Unlock()
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	deadline := time.Now().Add(10 * time.Minute) // a bound on waiting, not a timing assertion
	for i := range clients {
		wg.Go(func() {
			key := fmt.Sprintf("big-%03d", i)
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+env.shop)
				req.Header.Set("Idempotency-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					// A client sending a body serve refused unread may
					// see the connection reset before it reads the 503;
					// it sends again with its key, as after any lost
					// answer (docs/api.md).
					mu.Lock()
					transports++
					mu.Unlock()
					time.Sleep(time.Second)
					continue
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusAccepted:
					return
				case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(raw, []byte(`"code":"busy"`)):
					wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || wait < 1 {
						fault(fmt.Sprintf("%s: 503 with Retry-After %q", key, resp.Header.Get("Retry-After")))
						return
					}
					mu.Lock()
					busy++
					mu.Unlock()
					time.Sleep(time.Duration(wait) * time.Second)
				default:
					fault(fmt.Sprintf("%s: %d %s", key, resp.StatusCode, raw))
					return
				}
			}
			fault(key + ": not answered 202 within 10 minutes")
		})
	}
	wg.Wait()
	peak := peakRSS(t, pid)
	t.Logf("serve's peak RSS: %d MiB idle, %d MiB after %d sends of 1 MiB (%d answers 503 busy and %d connections lost, each sent again)",
		idle>>20, peak>>20, clients, busy, transports)
	if len(faults) > 0 {
		t.Fatalf("%d of %d sends did not end in 202: %s", len(faults), clients, strings.Join(faults[:min(5, len(faults))], "; "))
	}
	if busy == 0 {
		t.Fatal("no send was ever answered 503 busy: the budget was never full, so this test shows nothing about it")
	}
	if peak >= 160<<20 {
		t.Errorf("serve's peak RSS was %d MiB with 300 sends of 1 MiB; want under 160 MiB", peak>>20)
	}
	_ = p.proc.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("serve on SIGTERM: %v: %s", err, p.log.String())
	}
	st := env.b.watch(t)
	for i := range clients {
		m, err := st.MessageGet(context.Background(), "shop", fmt.Sprintf("big-%03d", i))
		if err != nil || m.Payload == nil || len(m.Payload.Text) < 1<<20-100 {
			t.Fatalf("big-%03d was answered 202 but is not stored whole: %v", i, err)
		}
	}
}

// peakRSS is a process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read a process's peak memory from: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
