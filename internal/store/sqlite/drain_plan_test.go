package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

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

	tr, db := traceStore(t, s, path)
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

	stmts := tr.take()
	if len(stmts) < 10 {
		t.Fatalf("the trace saw %d statements: it no longer sees the drain's", len(stmts))
	}
	seen := map[string]bool{}
	var distinct []traced
	for _, st := range stmts {
		q := strings.TrimSpace(st.query)
		if seen[q] || !planned(q) {
			continue
		}
		seen[q] = true
		distinct = append(distinct, traced{query: q, args: padArgs(q, st.args)})
	}
	for _, want := range []string{"INSERT INTO history", "UPDATE messages", "INSERT INTO attempts", "daily_recipients", "recipient_pace", "challenge"} {
		found := false
		for q := range seen {
			found = found || strings.Contains(q, want)
		}
		if !found {
			t.Errorf("no traced statement has %q: the trace misses part of the drain's path", want)
		}
	}
	// The triggers these statements fire (events, counts) are checked by
	// TestTriggersReachRowsThroughIndexes.
	checkPlans(t, db, "drain", distinct, partialIndexes(t, db))
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
		"SELECT p.id FROM endpoints p JOIN challenge_steps cs ON cs.challenge_id = p.id",
		"UPDATE recipient_pace SET next_at = 0 WHERE next_at > 5",
		"DELETE FROM daily_recipients WHERE last_at < 5",
	} {
		if bad := fullScans(explain(t, s.r, q, nil), aliases(q), partial); len(bad) == 0 {
			t.Errorf("no full scan found in the plan of %s: %q", q, explain(t, s.r, q, nil))
		}
	}
}
