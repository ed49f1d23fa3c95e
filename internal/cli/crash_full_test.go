//go:build full

package cli_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// TestKillNineMidDrainNeverSendsTwice SIGKILLs `msgq drain` processes
// while their calls are in flight against `msgq sim serve`, which accepts
// and then drops 10% of connections (and of SMTP transactions, after the
// final "."). One queue holds rows of every kind (mixedIdentities):
// WhatsApp, Twilio SMS and SMTP email have no idempotency key, so every
// lost answer is genuinely ambiguous; the http API deduplicates by key: a
// lost answer is retried with the same key and replayed by the provider,
// so fewer of its rows end unknown, and still none is delivered twice.
// Afterwards no message has reached its recipient twice, and every row is
// sent, unknown, or still leased (sending): none is lost, each uncertain
// one is visible.
//
// On SQLite one drain at a time is killed, five times over. On PostgreSQL
// eight drains run at once (claims skip each other's locked rows) and five
// of them are killed at different points of the run while the other three
// go on, then finish the queue and stop cleanly on SIGTERM.
func TestKillNineMidDrainNeverSendsTwice(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			killNine(t, kind)
		})
	}
}

func killNine(t *testing.T, kind string) {
	n := 300
	if kind == "postgres" {
		// Eight drains go through rows eight times as fast: more rows
		// keep the queue busy until the last kill.
		n = 1500
	}
	base, smtpPort := serveSimSMTP(t, "--fault-drop", "0.1", "--smtp-fault-drop", "0.1", "--latency", "30ms", "--seed", "11")
	names := []string{"wa", "tw", "mail", "web"}
	var lines strings.Builder
	for i := range n {
		name := names[i%len(names)]
		lines.WriteString(mixedLine(fmt.Sprintf("crash-%04d", i), name, i, fmt.Sprintf("hello %d", i)))
	}
	e, b := setupDrainEnvLines(t, kind, "default_identity: wa\nidentities:\n"+mixedIdentities(base, smtpPort, `    retry: {base: 10ms, cap: 50ms, max_attempts: 8}
    rate: "off"                   # this test is about kills, not pacing: WhatsApp's
    per_recipient_interval: "off" # default limits would only make it slower
`, names...), lines.String())

	// The test reads the store itself to kill each drain while it has
	// calls in flight: a fixed delay would, on a loaded machine, kill a
	// drain that had not started claiming yet.
	st := b.watch(t)
	var killed int
	if kind == "sqlite" {
		killed = killOneAtATime(t, e, st)
	} else {
		killed = killFiveOfEight(t, e, st, n)
	}
	if killed == 0 {
		t.Fatal("no drain was killed: the test proved nothing")
	}
	// Cron drains: whatever is still queued (retries wait milliseconds).
	for range 20 {
		e.run("drain")
		if q, _, _ := queueCounts(t, st); q == 0 {
			break
		}
		time.Sleep(60 * time.Millisecond)
	}

	counts, perRef, perAPI := checkAtMostOnce(t, e, base, n, "whatsapp", "twilio", "smtp", "http")
	if counts["sending"]+counts["unknown"] == 0 {
		t.Errorf("states %v: no call was in flight at a kill and no answer was lost; the test proved nothing", counts)
	}
	t.Logf("after %d kills: %v, %d deliveries (per API %v)", killed, counts, len(perRef), perAPI)
}

// killOneAtATime runs one drain at a time, five times, each killed once
// the store shows it has calls in flight.
func killOneAtATime(t *testing.T, e *msgqEnv, st store.Store) (killed int) {
	for round := range 5 {
		d := e.cmd("drain", "--follow", "--concurrency", "16")
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, mine := sendingBy(t, st, d.Process.Pid); mine > 0 {
				break
			}
		}
		time.Sleep(time.Duration(10*round) * time.Millisecond)
		if err := d.Process.Signal(syscall.SIGKILL); err == nil {
			killed++
		}
		_ = d.Wait()
	}
	return killed
}

// killFiveOfEight runs eight drains at once and kills five of them, each
// once the share of the queue in its schedule is done and the store shows
// the drain has calls in flight. The other three finish the queue (rows
// the killed ones leased stay in sending) and exit 0 on SIGTERM.
func killFiveOfEight(t *testing.T, e *msgqEnv, st store.Store, n int) (killed int) {
	var drains []*drainProc
	for range 8 {
		drains = append(drains, startDrain(t, e, "--follow", "--concurrency", "8"))
	}
	dead := map[int]bool{}
	for i, share := range []float64{0, 0.1, 0.25, 0.4, 0.55} {
		d := drains[i]
		pid := d.cmd.Process.Pid
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			q, s, _ := queueCounts(t, st)
			if float64(n-q-s) < share*float64(n) {
				continue
			}
			if _, mine := sendingBy(t, st, pid); mine > 0 {
				break
			}
			if q == 0 {
				break // nothing left to catch it with
			}
		}
		_, mine := sendingBy(t, st, pid)
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = d.cmd.Wait()
		dead[pid] = true
		if mine > 0 {
			killed++
		}
		t.Logf("killed drain %d with %d rows leased (share %.2f done)", i, mine, share)
	}
	// The survivors finish: nothing queued, and every row still in
	// sending is leased by a dead drain.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		q, s, _ := queueCounts(t, st)
		orphans := 0
		for pid := range dead {
			_, mine := sendingBy(t, st, pid)
			orphans += mine
		}
		if q == 0 && s == orphans {
			break
		}
		if time.Now().After(deadline) {
			for i, d := range drains[5:] {
				t.Logf("survivor %d stderr:\n%s", i, d.stderr.String())
			}
			t.Fatalf("the survivors left %d queued and %d sending (%d of them leased by killed drains)", q, s, orphans)
		}
	}
	for i, d := range drains[5:] {
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := d.cmd.Wait(); err != nil {
			t.Errorf("survivor %d after SIGTERM: %v: %s", i, err, d.stderr.String())
		}
	}
	return killed
}
