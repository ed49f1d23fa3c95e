//go:build full

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// TestASkewedHostTakesNoLiveLeaseAndHidesNoExpiredOne: a correct drain
// holds eight rows of three kinds (WhatsApp, Twilio SMS, SMTP email; frozen
// with SIGSTOP mid-call, its lease live on the server's clock) while a host ten minutes off runs reconcile, resolve and
// stuck: nothing is taken over, refused verdicts write nothing, no lease
// shows as expired, and once the drain resumes its answers land (all
// sent, none unknown, each delivered once). The skewed host warns about
// its clock, and stats and health show the offset it recorded. Then a
// skewed drain is killed holding rows: stuck, from either host, lists
// them as expired exactly once the server's clock has passed their lease.
func TestASkewedHostTakesNoLiveLeaseAndHidesNoExpiredOne(t *testing.T) {
	t.Parallel()
	for _, off := range skewOffsets {
		t.Run(skewName(off), func(t *testing.T) {
			t.Parallel()
			// Calls take a second at the sim: the drain is frozen with
			// them in flight.
			e, base, db := clockEnv(t, []string{"--latency", "1s"}, "")
			skew := e.skewed(off)
			// Rows of every kind: live-0 (resolved below) is WhatsApp's.
			sendMixed := func(key string, i int) {
				name := []string{"shop", "tw", "mail"}[i%3]
				args := []string{"send", "--key", key, "--identity", name, "--to", mixedTo(name, i), "--text", "hi"}
				if name == "mail" {
					args = append(args, "--subject", "Hi")
				}
				e.run(args...)
			}
			for i := range 8 {
				sendMixed(fmt.Sprintf("live-%d", i), i)
			}
			// A long call timeout: the freeze below must not outlast it
			// on a loaded machine (that is §1's lease check, not this).
			a := startDrain(t, e, "--concurrency", "8", "--lease", "2m", "--call-timeout", "90s")
			waitSQL(t, db, 8, "rows the correct drain claimed", "SELECT count(*) FROM messages WHERE state = 'sending'")
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			var owner string
			if err := db.QueryRow(context.Background(), "SELECT min(lease_owner) FROM messages").Scan(&owner); err != nil {
				t.Fatal(err)
			}

			out, stderr, code := skew.try("reconcile", "-o", "json")
			var rec struct {
				Changed []json.RawMessage `json:"changed"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || len(rec.Changed) != 0 {
				t.Errorf("skewed reconcile took live leases over (exit %d): %s %s", code, out, stderr)
			}
			side := "ahead of"
			if off < 0 {
				side = "behind"
			}
			warn := regexp.MustCompile(`(?m)^msgq: warning: this host's clock is 10m ` + side + ` the store's \(database server's\) clock \(offset [-+]\d+\.\d+s, threshold 2s\)`)
			if n := len(warn.FindAllString(stderr, -1)); n != 1 {
				t.Errorf("skewed reconcile printed %d clock warnings, want 1: %q", n, stderr)
			}
			var id string
			if err := db.QueryRow(context.Background(), "SELECT id FROM messages WHERE key = 'live-0'").Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, stderr, code := skew.try("resolve", id, "--as", "failed", "--note", "skewed operator"); code == 0 || !strings.Contains(stderr, "lease is live") {
				t.Errorf("skewed resolve of a live row: exit %d: %s", code, stderr)
			}
			for _, r := range stuckRows(t, skew, "--older-than", "0s") {
				if r.LeaseExpired {
					t.Errorf("skewed stuck lists %s's live lease as expired", r.Key)
				}
				if r.Age > int64(time.Minute) {
					t.Errorf("skewed stuck says %s entered its state %s ago", r.Key, time.Duration(r.Age))
				}
			}
			if n := sqlInt(t, db, "SELECT count(*) FROM messages WHERE state = 'sending' AND lease_owner = $1", owner); n != 8 {
				t.Errorf("%d of 8 rows still leased by the correct drain after the skewed host's commands", n)
			}
			if n := sqlInt(t, db, "SELECT count(*) FROM history WHERE source IN ('reconcile', 'operator')"); n != 0 {
				t.Errorf("the skewed host wrote %d history rows", n)
			}

			// The correct drain's answers land.
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if err := a.cmd.Wait(); err != nil {
				t.Fatalf("correct drain: %v: %s", err, a.stderr.String())
			}
			if !strings.Contains(a.stderr.String(), "sent 8,") || !strings.Contains(a.stderr.String(), "leases lost 0") {
				t.Errorf("correct drain: %s", a.stderr.String())
			}
			perRef, perAPI := map[string]int{}, map[string]int{}
			for _, d := range deliveries(t, base) {
				perRef[d.Ref]++
				perAPI[d.API]++
			}
			if perAPI["whatsapp"] != 3 || perAPI["twilio"] != 3 || perAPI["smtp"] != 2 {
				t.Errorf("deliveries per API %v, want whatsapp 3, twilio 3, smtp 2", perAPI)
			}
			if len(perRef) != 8 {
				t.Errorf("%d messages reached the phone, want 8", len(perRef))
			}
			for ref, n := range perRef {
				if n != 1 {
					t.Errorf("%s reached the phone %d times", ref, n)
				}
			}
			if n := sqlInt(t, db, "SELECT count(*) FROM messages WHERE state = 'sent'"); n != 8 {
				t.Errorf("%d of 8 rows sent", n)
			}

			// The offset the skewed reconcile recorded, as a correct host
			// sees it.
			var st struct {
				Offset  int64  `json:"clock_offset_ns"`
				Process string `json:"clock_offset_process"`
			}
			if err := json.Unmarshal([]byte(e.run("stats", "-o", "json")), &st); err != nil {
				t.Fatal(err)
			}
			if d := time.Duration(st.Offset) - off; d > 5*time.Second || d < -5*time.Second || !strings.HasPrefix(st.Process, "reconcile@") {
				t.Errorf("stats: clock offset %s by %q, want about %s by reconcile", time.Duration(st.Offset), st.Process, off)
			}
			prom := e.run("stats", "-o", "prometheus")
			m := regexp.MustCompile(`(?m)^msgq_clock_offset_seconds (\S+)$`).FindStringSubmatch(prom)
			if m == nil {
				t.Fatalf("no msgq_clock_offset_seconds in:\n%s", prom)
			}
			if v, err := strconv.ParseFloat(m[1], 64); err != nil || v-off.Seconds() > 5 || v-off.Seconds() < -5 {
				t.Errorf("msgq_clock_offset_seconds %s, want about %g", m[1], off.Seconds())
			}
			if _, stderr, code := e.try("health", "--max-clock-offset", "2s"); code != 4 || !strings.Contains(stderr, "health: clock of reconcile@") {
				t.Errorf("health --max-clock-offset 2s: exit %d: %s", code, stderr)
			}
			if _, stderr, code := e.try("health", "--max-clock-offset", "11m"); code != 0 {
				t.Errorf("health --max-clock-offset 11m: exit %d: %s", code, stderr)
			}

			// A skewed drain killed while it holds rows: its leases are the
			// server's 12 s, listed by stuck from either host exactly when
			// the server's clock has passed them.
			for i := range 4 {
				sendMixed(fmt.Sprintf("killed-%d", i), 100+i)
			}
			b := startDrain(t, skew, "--concurrency", "4", "--lease", "12s", "--call-timeout", "2s")
			waitSQL(t, db, 4, "rows the skewed drain claimed", "SELECT count(*) FROM messages WHERE state = 'sending'")
			if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = b.cmd.Wait()
			const leaseLeft = "SELECT count(*) FROM messages WHERE state = 'sending' AND lease_until > now() + interval '3 seconds'"
			if n := sqlInt(t, db, leaseLeft); n == 4 {
				for _, env := range []*msgqEnv{e, skew} {
					for _, r := range stuckRows(t, env, "--state", "sending") {
						t.Errorf("stuck lists %s (lease expired %v) while its lease is live on the server's clock", r.Key, r.LeaseExpired)
					}
				}
			} else {
				t.Logf("the machine is slow: only %d leases had 3s left; skipped the check of live leases", n)
			}
			// Past the lease and the takeover margin (store.TakeoverMargin),
			// which is when stuck and reconcile call a lease expired.
			waitSQL(t, db, 0, "killed rows whose lease (plus the takeover margin) is live on the server's clock",
				fmt.Sprintf("SELECT count(*) FROM messages WHERE state = 'sending' AND lease_until + interval '%d microseconds' > now()",
					store.TakeoverMargin.Microseconds()))
			for _, env := range []*msgqEnv{e, skew} {
				rs := stuckRows(t, env, "--state", "sending")
				expired := 0
				for _, r := range rs {
					if r.LeaseExpired && strings.HasPrefix(r.Key, "killed-") {
						expired++
					}
				}
				if expired != 4 {
					t.Errorf("stuck lists %d of the 4 killed rows as expired once the server's clock passed their lease: %+v", expired, rs)
				}
			}
		})
	}
}

// TestASkewedDrainKeepsPacing runs two drains on one paced identity, one
// of them on a host ten minutes off, then stops the skewed one: the
// correct drain finishes the queue (a skewed drain's slots would block it
// for ten minutes), and the sim's arrival times keep the identity's rate
// and the per-recipient interval (slots counted on two clocks would not).
func TestASkewedDrainKeepsPacing(t *testing.T) {
	t.Parallel()
	const (
		n          = 16
		recipients = 4
		rate       = 4 // per second
		interval   = time.Second
	)
	for _, off := range skewOffsets {
		t.Run(skewName(off), func(t *testing.T) {
			t.Parallel()
			// Headroom as TestDrainProcessesShareOneQueue's: the sim times
			// arrivals, and a loaded machine delays some calls.
			e, base, db := clockEnv(t, nil, fmt.Sprintf("    rate: %d/s\n    per_recipient_interval: %s\n    pacing_headroom: 0.5\n", rate, interval))
			for i := range n {
				e.run("send", "--key", fmt.Sprintf("paced-%02d", i), "--to", fmt.Sprintf("+1555200%04d", i%recipients), "--text", "hi")
			}
			skewedDrain := startDrain(t, e.skewed(off), "--follow", "--concurrency", "4")
			correct := startDrain(t, e, "--follow", "--concurrency", "4")
			waitSQL(t, db, 1, "a first delivery", "SELECT least(count(*), 1) FROM messages WHERE state = 'sent'")
			if err := skewedDrain.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := skewedDrain.cmd.Wait(); err != nil {
				t.Errorf("skewed drain after SIGTERM: %v: %s", err, skewedDrain.stderr.String())
			}
			waitSQL(t, db, n, "rows sent (by the correct drain once the skewed one stopped)", "SELECT count(*) FROM messages WHERE state = 'sent'")
			if err := correct.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := correct.cmd.Wait(); err != nil {
				t.Errorf("correct drain after SIGTERM: %v: %s", err, correct.stderr.String())
			}

			ds := deliveries(t, base)
			if len(ds) != n {
				t.Fatalf("%d deliveries, want %d", len(ds), n)
			}
			perRef := map[string]bool{}
			perRcpt := map[string][]time.Time{}
			var all []time.Time
			for _, d := range ds {
				if perRef[d.Ref] {
					t.Errorf("%s reached the phone twice", d.Ref)
				}
				perRef[d.Ref] = true
				perRcpt[d.To] = append(perRcpt[d.To], d.At)
				all = append(all, d.At)
			}
			sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
			for i := rate; i < len(all); i++ {
				if w := all[i].Sub(all[i-rate]); w < time.Second {
					t.Errorf("%d calls arrived within %s: the rate %d/s was exceeded", rate+1, w, rate)
				}
			}
			for to, ts := range perRcpt {
				sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
				for i := 1; i < len(ts); i++ {
					if gap := ts[i].Sub(ts[i-1]); gap < interval {
						t.Errorf("%s got two messages %s apart (interval %s)", to, gap, interval)
					}
				}
			}
		})
	}
}
