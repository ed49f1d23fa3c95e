package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
