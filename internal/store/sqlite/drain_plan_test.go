package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// drainBigTables are the tables a drain touches that grow with the queue's
// life (keys are kept for ever; events, evidence and replies with them;
// pacing and daily slots with every recipient): none may be read whole on
// the drain's path.
var drainBigTables = map[string]bool{"messages": true, "history": true, "attempts": true, "events": true,
	"challenges": true, "challenge_steps": true, "recipient_pace": true, "daily_recipients": true,
	"evidence": true, "webhook_events": true, "inbound": true, "opt_outs": true, "service_windows": true}

var drainAliasOf = regexp.MustCompile(`(?i)\b(messages|history|attempts|events|challenges|challenge_steps|recipient_pace|daily_recipients|evidence|webhook_events|inbound|opt_outs|service_windows|endpoints)\s+(?:AS\s+)?([a-z]\w*)`)

func drainAliases(q string) map[string]string {
	out := map[string]string{}
	for _, m := range drainAliasOf.FindAllStringSubmatch(q, -1) {
		switch strings.ToUpper(m[2]) {
		case "WHERE", "INDEXED", "SET", "ORDER", "GROUP", "LIMIT", "ON", "JOIN", "USING", "NOT", "AND", "OR", "VALUES",
			"SELECT", "LEFT", "INNER", "CROSS", "DEFAULT", "RETURNING", "WHEN", "BEGIN", "END", "FOR", "AFTER":
			continue
		}
		out[m[2]] = strings.ToLower(m[1])
	}
	return out
}

// drainFullScans is fullScans over drainBigTables.
func drainFullScans(plan []string, aliases map[string]string, partial map[string]bool) []string {
	var bad []string
	for _, line := range plan {
		m := scanLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		table := m[1]
		if t, ok := aliases[table]; ok {
			table = t
		}
		if !drainBigTables[table] {
			continue
		}
		if idx := m[3]; idx != "" && partial[idx] {
			continue
		}
		bad = append(bad, line)
	}
	return bad
}

// traceWrites replaces s's writer by one that records what it runs (and
// drops the statements prepared on the old one).
func traceWrites(tb testing.TB, s *Store, path string, t *tracer) {
	tb.Helper()
	old := s.w
	db := sql.OpenDB(&traceConnector{dsn: writerDSN(path, 10*time.Second), d: old.Driver(), t: t})
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	s.mu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.w = db
	s.mu.Unlock()
	tb.Cleanup(func() { db.Close() })
}

// triggerStatements returns the statements of every trigger's body, with
// NEW.x and OLD.x as NULL, for EXPLAIN: EXPLAIN QUERY PLAN of the INSERT
// that fires a trigger does not show the trigger's plan.
func triggerStatements(tb testing.TB, db *sql.DB) map[string][]string {
	tb.Helper()
	rs, err := db.Query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
	if err != nil {
		tb.Fatal(err)
	}
	defer rs.Close()
	out := map[string][]string{}
	ref := regexp.MustCompile(`\b(NEW|OLD)\.\w+`)
	for rs.Next() {
		var name, q string
		if err := rs.Scan(&name, &q); err != nil {
			tb.Fatal(err)
		}
		body := q[strings.Index(strings.ToUpper(q), "BEGIN")+len("BEGIN") : strings.LastIndex(strings.ToUpper(q), "END")]
		for _, st := range strings.Split(body, ";") {
			if st = strings.TrimSpace(st); st != "" {
				out[name] = append(out[name], ref.ReplaceAllString(st, "NULL"))
			}
		}
	}
	if err := rs.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestDrainStatementsReadOnlyThroughIndexes runs a drain on SQLite over
// every path a drain takes (an event endpoint, pacing, a daily recipient
// limit, challenges whose first step's outcome cancels the second, a row
// past its deadline) and asks SQLite for the plan of every statement it
// issued, as issued, and of every trigger those statements fire: none may
// read a table that grows with the queue whole. msgq never runs ANALYZE,
// so these are the plans a store of any size gets; the drain's cost per
// message then follows its batch, never the table (issue 25).
func TestDrainStatementsReadOnlyThroughIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "msgq.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EndpointAdd(ctx, &store.Endpoint{ID: "ep_plan", Tenant: store.DefaultTenant, URL: "https://app.example/hooks",
		Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}); err != nil {
		t.Fatal(err)
	}
	var ps []store.EnqueueParams
	for i := range 40 {
		p := storetest.Params(fmt.Sprintf("plan-%03d", i))
		p.To = fmt.Sprintf("+1555%07d", i)
		if i == 0 {
			p.ExpiresIn = time.Microsecond // past its deadline by the claim: expired, with its event
		}
		ps = append(ps, p)
	}
	if _, err := s.MessageEnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		first := storetest.Params(fmt.Sprintf("plan-challenge-%d", i))
		first.To = fmt.Sprintf("+1666%07d", i)
		second := first
		second.Payload = store.Payload{Text: "Your code is 123456"}
		if _, err := s.ChallengeEnqueue(ctx, &store.ChallengeParams{Key: first.Key, ExpiresIn: time.Hour,
			Steps: []store.ChallengeStepParams{{EnqueueParams: first}, {EnqueueParams: second, After: 30 * time.Minute}}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Millisecond) // row 0's deadline passes

	tr := &tracer{}
	traceWrites(t, s, path, tr)
	reads, db := traceReads(t, s, path)
	cfg := drain.Config{Store: s, Owner: "plan-drain", Concurrency: 8, Identities: map[string]*drain.Identity{"sim": {
		Name: "sim", Provider: sim.New(sim.DefaultConfig()).Provider(), Policy: retry.DefaultPolicy(),
		Pacing: store.Pacing{Spacing: time.Microsecond, PerRecipient: time.Second}, DailyRecipients: 1000}}}
	sum, err := drain.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 39+3 {
		t.Fatalf("drain %+v, want 42 sent", sum)
	}
	if _, err := s.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain}); err != nil {
		t.Fatal(err)
	}

	stmts := append(tr.take(), reads.take()...)
	if len(stmts) < 10 {
		t.Fatalf("the trace saw %d statements: it no longer sees the drain's", len(stmts))
	}
	partial := partialIndexes(t, db)
	seen := map[string]bool{}
	for _, st := range stmts {
		q := strings.TrimSpace(st.query)
		if seen[q] || !planned(q) {
			continue
		}
		seen[q] = true
		plan := explain(t, db, q, padArgs(q, st.args))
		if bad := drainFullScans(plan, drainAliases(q), partial); len(bad) > 0 {
			t.Errorf("a drain statement reads a table that grows with the queue whole: %q\nstatement: %s\nplan:\n  %s",
				bad, q, strings.Join(plan, "\n  "))
		}
	}
	for _, want := range []string{"INSERT INTO history", "UPDATE messages", "INSERT INTO attempts", "daily_recipients", "challenge"} {
		found := false
		for q := range seen {
			found = found || strings.Contains(q, want)
		}
		if !found {
			t.Errorf("no traced statement has %q: the trace misses part of the drain's path", want)
		}
	}
	triggers := triggerStatements(t, db)
	for _, want := range []string{"history_events", "challenge_events", "daily_counts_insert"} {
		if len(triggers[want]) == 0 {
			t.Errorf("trigger %s not found among %d: the check misses it", want, len(triggers))
		}
	}
	for name, body := range triggers {
		for _, q := range body {
			plan := explain(t, db, q, nil)
			if bad := drainFullScans(plan, drainAliases(q), partial); len(bad) > 0 {
				t.Errorf("trigger %s reads a table that grows with the queue whole: %q\nstatement: %s\nplan:\n  %s",
					name, bad, q, strings.Join(plan, "\n  "))
			}
		}
	}
}

// planned says EXPLAIN QUERY PLAN can say something of q: a DML or query
// statement, not a transaction's BEGIN or a PRAGMA.
func planned(q string) bool {
	u := strings.ToUpper(q)
	for _, p := range []string{"SELECT", "WITH", "INSERT", "UPDATE", "DELETE"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// padArgs gives a statement recorded when it was prepared (so without its
// arguments) a NULL for each of its parameters: its plan does not depend
// on them.
func padArgs(q string, args []any) []any {
	if len(args) > 0 {
		return args
	}
	n, inString := 0, false
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'':
			inString = !inString
		case c == '?' && !inString:
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			if j > i+1 {
				var k int
				fmt.Sscan(q[i+1:j], &k)
				n = max(n, k)
			} else {
				n++
			}
		}
	}
	return make([]any, n)
}

// TestTheDrainScanCheckCatchesAFullScan keeps the check above honest.
func TestTheDrainScanCheckCatchesAFullScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	partial := partialIndexes(t, s.r)
	for _, q := range []string{
		"SELECT count(*) FROM events e WHERE e.payload = ''",
		"SELECT e.id FROM endpoints e JOIN challenge_steps cs ON cs.challenge_id = e.id",
		"UPDATE recipient_pace SET next_at = 0 WHERE next_at > 5",
		"DELETE FROM daily_recipients WHERE last_at < 5",
	} {
		if bad := drainFullScans(explain(t, s.r, q, nil), drainAliases(q), partial); len(bad) == 0 {
			t.Errorf("no full scan found in the plan of %s: %q", q, explain(t, s.r, q, nil))
		}
	}
}
