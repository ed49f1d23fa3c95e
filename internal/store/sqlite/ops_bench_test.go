package sqlite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// The 1,000,000-row store of issue 5's performance promise: stuck, stats
// and health answer in under 200 ms each.
//
//	go test -run '^$' -bench Ops1M -benchtime 20x ./internal/store/sqlite
//
// The store is built once per run by a few INSERT ... SELECT statements
// (about a minute); MSGQ_BENCH_DB=PATH keeps it at PATH and reuses it on the
// next run (delete it after a schema change). MSGQ_BENCH_ROWS changes the
// size.

const benchRowsDefault = 1_000_000

// crockford is the ULID alphabet.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// base32SQL is an SQL expression spelling the integer expression x in
// chars Crockford base-32 digits, most significant first.
func base32SQL(x string, chars int) string {
	parts := make([]string, chars)
	for j := range chars {
		parts[j] = fmt.Sprintf("substr('%s', ((%s) >> %d & 31) + 1, 1)", crockford, x, 5*(chars-1-j))
	}
	return strings.Join(parts, " || ")
}

// benchShape is what the built store holds, in round figures, for the
// README and the report.
const benchShape = `rows created evenly over 7 days (about 1.65 a second), four identities, one
of them (alerts) paused with a backlog of about 12,500 old queued rows that the
oldest-eligible walk must pass over; 0.5% unknown and 0.5% in sending with an
expired lease (about 10,000 rows in flight, all older than a minute); of the
last hour, 30% queued and 1% sending with a live lease; the rest finished
(delivered 74%, read 15%, sent 5%, failed 5%), each with its full history
(3.9 rows per message) and one attempt`

// buildBenchStore fills s (a fresh store) with n messages and their
// history and attempts, as drains and webhooks would have left them by
// now.
func buildBenchStore(tb testing.TB, s *Store, n int, now time.Time) {
	tb.Helper()
	ctx := context.Background()
	const (
		sec  = int64(time.Second / time.Microsecond)
		week = 7 * 24 * 3600 * sec
	)
	end := now.UnixMicro()
	start, step := end-week, week/int64(n)
	recent := end - 3600*sec
	exec := func(q string, args ...any) {
		tb.Helper()
		if _, err := s.w.ExecContext(ctx, q, args...); err != nil {
			tb.Fatalf("%v\n%s", err, q)
		}
	}
	exec("PRAGMA cache_size = -524288") // the build's own connection; reset below
	exec("BEGIN")
	// k is a scrambled per-mille that decides a row's fate.
	exec(`INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
	payload, state, reason, attempts, next_attempt_at, expires_at, lease_owner, lease_until, provider_id, last_error,
	resend_of, resolution, created_at, updated_at, maybe_sent)
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?1),
r AS (SELECT i, (i * 7919) % 1000 AS k, ?2 + i * ?3 AS created FROM seq),
s AS (SELECT i, k, created, CASE
		WHEN created >= ?4 AND k < 300 THEN 'queued'
		WHEN created >= ?4 AND k < 310 THEN 'sending'
		WHEN i % 4 = 2 AND k >= 850 AND k < 900 THEN 'queued'
		WHEN k < 5 THEN 'unknown'
		WHEN k < 10 THEN 'sending'
		WHEN k < 60 THEN 'failed'
		WHEN k < 110 THEN 'sent'
		WHEN k < 850 THEN 'delivered'
		ELSE 'read' END AS state FROM r)
SELECT `+base32SQL("created / 1000", 10)+` || `+base32SQL("i", 16)+`,
	'default', 'order-' || i, printf('%064x', i), '+1555' || printf('%07d', i % 200000), 'whatsapp',
	CASE i % 4 WHEN 0 THEN 'shop' WHEN 1 THEN 'support' WHEN 2 THEN 'alerts' ELSE 'sim' END,
	CASE i % 3 WHEN 0 THEN 'otp' WHEN 1 THEN 'marketing' ELSE 'order' END,
	'ref-' || i, CASE WHEN k % 10 = 0 THEN 'reply' ELSE 'bulk' END,
	'{"template":"order_update","lang":"en","params":["Ada","' || i || '"]}',
	state, CASE state WHEN 'failed' THEN 'permanent' ELSE '' END, CASE state WHEN 'queued' THEN 0 ELSE 1 END,
	created, NULL,
	CASE state WHEN 'sending' THEN 'bench-drain' ELSE '' END,
	CASE state WHEN 'sending' THEN created + ?5 * CASE WHEN created >= ?4 THEN 3601 ELSE 301 END END,
	CASE WHEN state IN ('sent', 'delivered', 'read') THEN 'wamid.' || i ELSE '' END,
	CASE state WHEN 'failed' THEN '{"error":{"message":"(#131026) Message undeliverable","type":"OAuthException","code":131026,"fbtrace_id":"A' || i || '"}}' ELSE '' END,
	'', '', created,
	created + CASE state WHEN 'queued' THEN 0 WHEN 'sending' THEN ?5 WHEN 'delivered' THEN ?5 * (3 + k % 20)
		WHEN 'read' THEN 60 * ?5 ELSE ?5 + ?5 / 5 END,
	0
FROM s`, n, start, step, recent, sec)

	// History: every row's enqueue; the claim of every row that left
	// queued; the call's outcome; the delivery and read webhooks.
	k := "((CAST(substr(key, 7) AS INTEGER) * 7919) % 1000)"
	exec(`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT id, 1, '', 'queued', '', 'enqueue', 1, 'send', '', created_at FROM messages`)
	exec(`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT id, 2, 'queued', 'sending', '', 'claim', 1, 'drain', 'lease bench-drain', created_at + ?1 FROM messages WHERE state <> 'queued'`, sec)
	exec(`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT id, 3, 'sending', CASE state WHEN 'failed' THEN 'failed' WHEN 'unknown' THEN 'unknown' ELSE 'sent' END,
	reason, CASE state WHEN 'failed' THEN 'fail(permanent)' WHEN 'unknown' THEN 'ambiguous' ELSE 'accept' END,
	1, 'drain', '', created_at + ?1 + ?1 / 5
FROM messages WHERE state NOT IN ('queued', 'sending')`, sec)
	exec(`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT id, 4, 'sent', 'delivered', '', 'evidence(delivered)', 1, 'webhook', '', created_at + ?1 * (3 + `+k+` % 20)
FROM messages WHERE state IN ('delivered', 'read')`, sec)
	exec(`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT id, 5, 'delivered', 'read', '', 'evidence(read)', 1, 'webhook', '', created_at + 60 * ?1
FROM messages WHERE state = 'read'`, sec)
	exec(`INSERT INTO attempts (message_id, number, started_at, finished_at, class, http_status, provider_code, raw_error, latency_us)
SELECT id, 1, created_at + ?1, created_at + ?1 + ?1 / 5,
	CASE state WHEN 'failed' THEN 'permanent' WHEN 'unknown' THEN 'ambiguous' ELSE 'accepted' END,
	CASE state WHEN 'failed' THEN 400 WHEN 'unknown' THEN 0 ELSE 200 END,
	CASE state WHEN 'failed' THEN '131026' ELSE '' END, last_error, ?1 / 5
FROM messages WHERE state NOT IN ('queued', 'sending') ORDER BY id`, sec)
	exec(`INSERT INTO identities (name, paused, paused_reason, paused_at, updated_at) VALUES ('alerts', 1, 'operator: bench', ?1, ?1)`, end)
	exec(`INSERT INTO counters (name, n) VALUES (?1, 1234) ON CONFLICT (name) DO UPDATE SET n = 1234`, store.CounterKeyReplays)
	exec("COMMIT")
	exec("PRAGMA wal_checkpoint(TRUNCATE)")
	exec("PRAGMA cache_size = -16384")
}

var bench1M struct {
	once sync.Once
	path string
	now  time.Time
	err  error
}

// benchStore returns the path of the built store and the time it was
// built for.
func benchStore(b *testing.B) (string, time.Time) {
	b.Helper()
	bench1M.once.Do(func() {
		n := benchRowsDefault
		if v := os.Getenv("MSGQ_BENCH_ROWS"); v != "" {
			if n, bench1M.err = strconv.Atoi(v); bench1M.err != nil {
				return
			}
		}
		path := os.Getenv("MSGQ_BENCH_DB")
		if path != "" {
			if _, err := os.Stat(path + ".built"); err == nil {
				bench1M.path = path
				raw, _ := os.ReadFile(path + ".built")
				bench1M.now, bench1M.err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(raw)))
				return
			}
		} else {
			dir, err := os.MkdirTemp("", "msgq-bench-ops-")
			if err != nil {
				bench1M.err = err
				return
			}
			path = filepath.Join(dir, "msgq.db")
		}
		s, err := Open(context.Background(), path, Options{})
		if err != nil {
			bench1M.err = err
			return
		}
		defer s.Close()
		now := time.Now().UTC().Truncate(time.Second)
		t0 := time.Now()
		buildBenchStore(b, s, n, now)
		b.Logf("built %d rows in %s at %s", n, time.Since(t0).Round(time.Second), path)
		bench1M.path, bench1M.now = path, now
		if os.Getenv("MSGQ_BENCH_DB") != "" {
			bench1M.err = os.WriteFile(path+".built", []byte(now.Format(time.RFC3339Nano)), 0o600)
		}
	})
	if bench1M.err != nil {
		b.Fatal(bench1M.err)
	}
	return bench1M.path, bench1M.now
}

// BenchmarkOps1M measures stats, stuck and health over the 1,000,000-row
// store (see benchShape): the store methods in a warm process, and the msgq
// commands as processes (what cron runs: start-up, a cold page cache, the
// query, the output).
func BenchmarkOps1M(b *testing.B) {
	path, now := benchStore(b)
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// The figures the runs below must see, so that a benchmark never times
	// an empty answer.
	st, err := s.Stats(ctx, &store.StatsParams{Now: now})
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, c := range st.Counts {
		total += c.N
	}
	b.Logf("%d rows; oldest eligible %v; sending past lease %d; unknown %d; attempts %v; delivered %d (p50 %v, p95 %v)",
		total, st.OldestEligible, st.SendingPastLease, st.Unknown, st.AttemptsByClass, st.Delivered, st.DeliveryP50, st.DeliveryP95)

	ms := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
	}
	b.Run("store/Stats", func(b *testing.B) {
		t0 := time.Now()
		for range b.N {
			if _, err := s.Stats(ctx, &store.StatsParams{Now: now}); err != nil {
				b.Fatal(err)
			}
		}
		ms(b, t0)
	})
	b.Run("store/Stats-window-24h", func(b *testing.B) {
		t0 := time.Now()
		for range b.N {
			if _, err := s.Stats(ctx, &store.StatsParams{Now: now, Window: 24 * time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		ms(b, t0)
	})
	b.Run("store/Stats-sent-progress", func(b *testing.B) {
		// What stats and health ask with webhooks configured: the sent
		// rows of the last hour of every identity, and their progress.
		t0 := time.Now()
		for range b.N {
			if _, err := s.Stats(ctx, &store.StatsParams{Now: now, ProgressIdentities: []string{"alerts", "shop", "sim", "support"}}); err != nil {
				b.Fatal(err)
			}
		}
		ms(b, t0)
	})
	b.Run("store/MessageStuck", func(b *testing.B) {
		t0 := time.Now()
		for range b.N {
			rows, err := s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute, Now: now})
			if err != nil || len(rows) != store.DefaultListLimit {
				b.Fatalf("%d rows, %v", len(rows), err)
			}
		}
		ms(b, t0)
	})
	b.Run("store/MessageStuck-unknown-identity", func(b *testing.B) {
		t0 := time.Now()
		for range b.N {
			if _, err := s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute, Now: now, State: "unknown", Identity: "sim"}); err != nil {
				b.Fatal(err)
			}
		}
		ms(b, t0)
	})
	b.Run("store/MessagePurge-dry-run-90d", func(b *testing.B) {
		// Not a promise of issue 5 (purge is a nightly job), measured to
		// know it.
		t0 := time.Now()
		for range b.N {
			if _, err := s.MessagePurge(ctx, &store.PurgeParams{Before: now.Add(-3 * 24 * time.Hour), DryRun: true}); err != nil {
				b.Fatal(err)
			}
		}
		ms(b, t0)
	})

	b.Run("store/Stats-by-statement", func(b *testing.B) {
		// Where Stats' time goes: each statement it issues, as issued,
		// timed on its own (logged with -v; the op is all of them).
		ts, err := Open(ctx, path, Options{NoMigrate: true})
		if err != nil {
			b.Fatal(err)
		}
		defer ts.Close()
		tr, db := traceStore(b, ts, path)
		if _, err := ts.Stats(ctx, &store.StatsParams{Now: now}); err != nil {
			b.Fatal(err)
		}
		stmts := tr.take()
		spent := make([]time.Duration, len(stmts))
		b.ResetTimer()
		for range b.N {
			for i, st := range stmts {
				t0 := time.Now()
				rs, err := db.QueryContext(ctx, st.query, st.args...)
				if err != nil {
					b.Fatal(err)
				}
				for rs.Next() {
				}
				rs.Close()
				spent[i] += time.Since(t0)
			}
		}
		b.StopTimer()
		for i, st := range stmts {
			b.Logf("%8.2f ms  %.110s", float64(spent[i].Microseconds())/1000/float64(b.N), strings.Join(strings.Fields(st.query), " "))
		}
	})

	// The commands, as processes.
	bin := filepath.Join(b.TempDir(), "msgq")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/msgq/msgq/cmd/msgq").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(b.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("log_level: warn\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int // what the command exits with on this store
	}{
		{"process/version", []string{"version"}, 0}, // start-up alone, for scale
		{"process/stats", []string{"stats"}, 0},
		{"process/stats-json", []string{"stats", "-o", "json"}, 0},
		{"process/stats-prometheus", []string{"stats", "-o", "prometheus"}, 0},
		{"process/health", []string{"health", "--max-oldest-queued", "5m", "--max-stuck", "0"}, 4},
		{"process/stuck", []string{"stuck", "--older-than", "1m"}, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			args := append([]string{"--store", "sqlite:" + path, "--config", cfg}, c.args...)
			run := func() {
				cmd := exec.Command(bin, args...)
				out, err := cmd.CombinedOutput()
				if code := cmd.ProcessState.ExitCode(); code != c.code {
					if strings.Contains(string(out), "unknown command") {
						b.Skipf("this msgq has no %s command", c.args[0])
					}
					b.Fatalf("%v: exit %d (%v), want %d:\n%s", c.args, code, err, c.code, out)
				}
			}
			run() // warm the OS page cache, as a store in use has it
			b.ResetTimer()
			t0 := time.Now()
			for range b.N {
				run()
			}
			ms(b, t0)
		})
	}
}
