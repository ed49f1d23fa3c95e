package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
)

// The tests in this file run one msgq process as if on a host whose clock
// is ten minutes ahead or behind (MSGQ_TEST_CLOCK_OFFSET shifts the clock
// the process reads) against a PostgreSQL store and a `msgq sim serve`
// process, whose delivery log is the oracle. Every decision several hosts
// share must be made on the database server's clock: a skewed host takes
// no live lease, hides no expired one, breaks no pacing and moves no
// schedule or deadline.

// skewOffsets are the host clock offsets every test here runs with.
var skewOffsets = []time.Duration{600 * time.Second, -600 * time.Second}

func skewName(off time.Duration) string { return fmt.Sprintf("host clock %+ds", int(off.Seconds())) }

// skewed is e with the host clock of its processes shifted by off.
func (e *msgqEnv) skewed(off time.Duration) *msgqEnv {
	return &msgqEnv{t: e.t, env: append(append([]string{}, e.env...), "MSGQ_TEST_CLOCK_OFFSET="+off.String())}
}

// try runs msgq and returns stdout, stderr and the exit code.
func (e *msgqEnv) try(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	c := e.cmd(args...)
	var out, errb syncBuffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// clockEnv is a PostgreSQL store, a sim serve process (with extra flags,
// and an SMTP server) and a config with one WhatsApp identity through it,
// the default (extra YAML lines appended to the identity), and a Twilio
// SMS one (tw) and an SMTP email one (mail) as mixedIdentities has them.
func clockEnv(t *testing.T, simArgs []string, identity string) (e *msgqEnv, base string, db *pgx.Conn) {
	t.Helper()
	base, smtpPort := serveSimSMTP(t, simArgs...)
	storeURL, _ := pgStore(t, "msgq_clock")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, fmt.Sprintf(`default_identity: shop
identities:
  shop:
    provider: whatsapp
    base_url: %s
    phone_number_id: "1000001"
    token_env: MSGQ_TEST_TOKEN
%s%s`, base, identity, mixedIdentities(base, smtpPort, "", "tw", "mail")))
	e = &msgqEnv{t: t, env: append([]string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + storeURL}, mixedEnvVars...)}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(ctx) })
	return e, base, db
}

func sqlInt(t *testing.T, db *pgx.Conn, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitSQL polls until the query's count is want.
func waitSQL(t *testing.T, db *pgx.Conn, want int, what, q string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		n := sqlInt(t, db, q, args...)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after a minute, want %d", what, n, want)
		}
	}
}

type stuckJSONRow struct {
	Key          string `json:"key"`
	State        string `json:"state"`
	LeaseExpired bool   `json:"lease_expired"`
	Age          int64  `json:"age_ns"`
}

func stuckRows(t *testing.T, e *msgqEnv, args ...string) []stuckJSONRow {
	t.Helper()
	var rs []stuckJSONRow
	if err := json.Unmarshal([]byte(e.run(append([]string{"stuck", "-o", "json"}, args...)...)), &rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

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

// TestASkewedHostKeepsSchedulesAndDeadlines: --not-before 5m and
// --expires-in 5m, sent from a correct host and from one ten minutes off,
// are five minutes on the server's clock; a drain on the skewed host
// sends the rows with a deadline (none failed as expired) and none of the
// scheduled ones (none sent early).
func TestASkewedHostKeepsSchedulesAndDeadlines(t *testing.T) {
	t.Parallel()
	for _, off := range skewOffsets {
		t.Run(skewName(off), func(t *testing.T) {
			t.Parallel()
			// Unpaced: the two deadline rows go to one recipient, and
			// WhatsApp's default spacing would hold the second past this
			// one-shot drain.
			e, base, db := clockEnv(t, nil, "    rate: off\n    per_recipient_interval: off\n")
			skew := e.skewed(off)
			for _, env := range []struct {
				name string
				e    *msgqEnv
			}{{"correct", e}, {"skewed", skew}} {
				env.e.run("send", "--key", "later-"+env.name, "--to", "+15553000001", "--text", "hi", "--not-before", "5m")
				env.e.run("send", "--key", "deadline-"+env.name, "--to", "+15553000002", "--text", "hi", "--expires-in", "5m")
			}
			if _, stderr, code := skew.try("drain"); code != 0 {
				t.Fatalf("skewed drain: exit %d: %s", code, stderr)
			}
			rows := map[string]string{}
			rs, err := db.Query(context.Background(), "SELECT key, state, "+
				"extract(epoch FROM next_attempt_at - created_at)::bigint, coalesce(extract(epoch FROM expires_at - created_at)::bigint, -1) FROM messages")
			if err != nil {
				t.Fatal(err)
			}
			for rs.Next() {
				var key, st string
				var next, exp int64
				if err := rs.Scan(&key, &st, &next, &exp); err != nil {
					t.Fatal(err)
				}
				rows[key] = st
				switch {
				case strings.HasPrefix(key, "later-") && next != 300:
					t.Errorf("%s is due %ds after it was enqueued, want 300", key, next)
				case strings.HasPrefix(key, "deadline-") && exp != 300:
					t.Errorf("%s expires %ds after it was enqueued, want 300", key, exp)
				}
			}
			if err := rs.Err(); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"later-correct": "queued", "later-skewed": "queued", "deadline-correct": "sent", "deadline-skewed": "sent"}
			for k, s := range want {
				if rows[k] != s {
					t.Errorf("%s is %q, want %s", k, rows[k], s)
				}
			}
			if ds := deliveries(t, base); len(ds) != 2 {
				t.Errorf("%d deliveries, want the 2 rows with a deadline: %+v", len(ds), ds)
			}
		})
	}
}

// TestClockOffsetOnSQLiteIsZero: every process of a SQLite store shares
// one host, so a shifted host clock is the store's clock too: no warning,
// and stats and health report no offset.
func TestClockOffsetOnSQLiteIsZero(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := newBackend(t, "sqlite", dir)
	e := &msgqEnv{t: t, env: []string{"MSGQ_STORE=" + b.url, "MSGQ_CONFIG=" + filepath.Join(dir, "none.yaml")}}
	writeFile(t, filepath.Join(dir, "none.yaml"), "default_identity: sim\n")
	skew := e.skewed(600 * time.Second)
	skew.run("send", "--key", "k1", "--to", "+15554000001", "--text", "hi", "--expires-in", "5m")
	if _, stderr, code := skew.try("drain"); code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("drain on SQLite with a shifted clock: exit %d: %s", code, stderr)
	}
	var st struct {
		Offset  *int64  `json:"clock_offset_ns"`
		Process *string `json:"clock_offset_process"`
	}
	if err := json.Unmarshal([]byte(e.run("stats", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Offset == nil || *st.Offset != 0 || st.Process == nil || *st.Process != "" {
		t.Errorf("stats on SQLite: clock offset %v by %v, want 0 by none", st.Offset, st.Process)
	}
	if _, stderr, code := e.try("health", "--max-clock-offset", "1s"); code != 0 {
		t.Errorf("health --max-clock-offset 1s on SQLite: exit %d: %s", code, stderr)
	}
	// The test hook refuses what is not a duration, like any bad input.
	if out, stderr, code := e.skewed(0).try("stats"); code != 0 {
		t.Errorf("stats with a zero offset: exit %d: %s%s", code, out, stderr)
	}
	bad := &msgqEnv{t: t, env: append(append([]string{}, e.env...), "MSGQ_TEST_CLOCK_OFFSET=soon")}
	if out, stderr, code := bad.try("stats"); code != 2 || out != "" ||
		stderr != "msgq: MSGQ_TEST_CLOCK_OFFSET \"soon\" is not a duration like 600s or -10m\n" {
		t.Errorf("MSGQ_TEST_CLOCK_OFFSET=soon: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestASkewedWebhookServeWarnsAndStillApplies: `webhook serve` on a host
// ten minutes ahead warns once about its clock, records the offset (stats
// names it), and still applies a status to its row, written on the
// server's clock.
func TestASkewedWebhookServeWarnsAndStillApplies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := newBackend(t, "postgres", dir)
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, webhookConfig)
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
		"MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_VERIFY_TOKEN=v"}}
	e.run("migrate")
	st := b.watch(t)
	ids, wamids := acceptedRows(t, st, 1)
	p, url := startServe(t, e.skewed(10*time.Minute), "--poll", "50ms")
	if code, err := postSigned(url, waStatusBody(wamids[0], "delivered", time.Now().Unix())); err != nil || code != 200 {
		t.Fatalf("post: %d %v", code, err)
	}
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, err := st.MessageGet(ctx, "", ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if m.State == "delivered" {
			now, err := st.ClockNow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := now.Sub(m.UpdatedAt); d < 0 || d > time.Minute {
				t.Errorf("delivered at %v, the server's clock says %v", m.UpdatedAt, now)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("row %s after 30s: %s", m.State, p.log.String())
		}
	}
	var s struct {
		Offset  int64  `json:"clock_offset_ns"`
		Process string `json:"clock_offset_process"`
	}
	if err := json.Unmarshal([]byte(e.run("stats", "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(s.Offset) - 10*time.Minute; d.Abs() > 5*time.Second || !strings.HasPrefix(s.Process, "webhook serve@") {
		t.Errorf("stats: clock offset %s by %q, want about 10m by webhook serve", time.Duration(s.Offset), s.Process)
	}
	if err := p.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Errorf("webhook serve after SIGTERM: %v: %s", err, p.log.String())
	}
	if n := strings.Count(p.log.String(), "msgq: warning: this host's clock is 10m ahead of the store's"); n != 1 {
		t.Errorf("%d clock warnings, want 1: %s", n, p.log.String())
	}
}
