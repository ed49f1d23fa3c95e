package postgres

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store/aged"
	"github.com/msgq/msgq/internal/store/hotpath"
	"github.com/msgq/msgq/internal/store/postgres/pgwork"
)

// The hot paths besides the drain (internal/store/hotpath: a webhook
// status, single sends, msgq serve's group commit, the events dispatcher,
// reconcile, stuck, stats, health) must cost in proportion to what they
// handle, never to the finished rows a queue keeps for ever (keys are kept
// for ever). This test runs each beside a few thousand finished rows and
// beside twenty times as many, counts PostgreSQL's work (pgwork: rows its
// scans read and buffers they touched, per table), and fails when any
// table's work per operation grows with the table. It counts work, not
// time: a busy machine cannot make it pass or fail.
//
// MSGQ_TEST_SCALE_SIZES=10000,1000000 runs it at other sizes (a one-off
// measurement; the figures are in docs/operations.md).

// scaleSizes are the finished rows of the two measurements.
func scaleSizes(t *testing.T) (int, int) {
	small, big := 2000, 40000
	if v := os.Getenv("MSGQ_TEST_SCALE_SIZES"); v != "" {
		a, b, ok := strings.Cut(v, ",")
		var err1, err2 error
		small, err1 = strconv.Atoi(a)
		big, err2 = strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || small <= hotpath.InFlight || big < small {
			t.Fatalf("MSGQ_TEST_SCALE_SIZES=%q: want two sizes, the smaller first (10000,1000000)", v)
		}
	}
	return small, big
}

func TestHotPathWorkDoesNotGrowWithTheTable(t *testing.T) {
	base := testURL(t)
	small, big := scaleSizes(t)
	ws := measureHotPaths(t, base, small)
	wb := measureHotPaths(t, base, big)
	var report strings.Builder
	fmt.Fprintf(&report, "work per operation beside %d and %d finished rows (rows read, buffers touched):\n", small, big)
	for _, op := range hotpath.Ops(small) {
		s, b := ws[op.Name], wb[op.Name]
		n := float64(op.N)
		fmt.Fprintf(&report, "  %-28s %8.1f rows %8.1f buffers | %8.1f rows %8.1f buffers\n", op.Name,
			float64(s.Rows())/n, float64(s.Blocks())/n, float64(b.Rows())/n, float64(b.Blocks())/n)
		var grew []string
		for _, name := range tables(s, b) {
			ts, tb := s[name], b[name]
			rs, rb := float64(ts.SeqRows+ts.IndexRows)/n, float64(tb.SeqRows+tb.IndexRows)/n
			bs, bb := float64(ts.Blocks)/n, float64(tb.Blocks)/n
			// Rows read must not grow: a plan that reads a table whole,
			// or walks an index over every finished row, reads rows in
			// proportion to it. Buffers may grow a little, as B-trees
			// of twenty times the rows get a level deeper; a walk of a
			// table or index adds hundreds.
			if rb > rs*1.15+3 || bb > bs*1.5+10 {
				grew = append(grew, fmt.Sprintf("%s: %.1f rows, %.1f buffers beside %d; %.1f rows, %.1f buffers beside %d",
					name, rs, bs, small, rb, bb, big))
			}
		}
		if testing.Verbose() {
			t.Logf("%s beside %d:\n%s\nbeside %d:\n%s", op.Name, small, s, big, b)
		}
		if len(grew) > 0 {
			t.Errorf("%s: work per operation grows with the table:\n  %s\nbeside %d:\n%s\nbeside %d:\n%s",
				op.Name, strings.Join(grew, "\n  "), small, s, big, b)
		}
	}
	t.Log(report.String())
}

// tables are the tables either measurement did work on.
func tables(ws ...pgwork.Work) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range ws {
		for name, t := range w {
			if !seen[name] && (t.SeqRows != 0 || t.IndexRows != 0 || t.Blocks != 0) {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// measureHotPaths fills a fresh schema with finished rows (and a few in
// flight), then runs each operation of hotpath.Ops alone, on a store of
// its own, and returns the work each did.
func measureHotPaths(t *testing.T, base string, finished int) map[string]pgwork.Work {
	t.Helper()
	ctx := context.Background()
	schema := freshSchema(t, base)
	app := schema // every counted connection's application_name: pgwork.Idle waits for them
	storeURL := withQuery(t, base, "application_name", app)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })

	s, err := Open(ctx, storeURL, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	now, err := s.ClockNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The fill's connection is counted too, and ends before anything is
	// measured: a live backend publishes its counts late.
	fill, err := pgx.Connect(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	err = aged.Postgres(ctx, fill, schema, hotpath.Shape(finished, now))
	fill.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgwork.NoAutovacuum(ctx, admin, schema); err != nil {
		t.Fatal(err)
	}
	// The endpoint after the fill: aged writes the aged rows' events.
	s, err = Open(ctx, storeURL, Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	err = hotpath.Setup(ctx, s)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}

	// The fill's triggers wrote a delta for each row of a counted class
	// (ended challenges, fallbacks, dead events), folded a thousand at a
	// time, and autovacuum, off here, would have cleared what the folds
	// deleted (0024 has it run on the delta tables after each fold). The
	// tables are emptied by the fold, and truncated rather than vacuumed:
	// a VACUUM keeps dead rows while any transaction of the server is
	// older than them, and another package's tests on the same server
	// (go test runs packages at once) made the deltas' dead rows, in
	// proportion to the fill, count as this test's work.
	if err := foldCounts(ctx, withQuery(t, storeURL, "search_path", schema), "state_count_deltas", "counter_deltas"); err != nil {
		t.Fatal(err)
	}
	out := map[string]pgwork.Work{}
	for _, op := range hotpath.Ops(finished) {
		// Each operation reads the running counts' deltas written since
		// the last fold (0024): a thousand at most, whatever the size,
		// but as many as the sequence's place says. Folding first makes
		// them those of the operation alone, the same at both sizes.
		if err := foldCounts(ctx, withQuery(t, storeURL, "search_path", schema)); err != nil {
			t.Fatal(err)
		}
		if err := pgwork.Idle(ctx, admin, app); err != nil {
			t.Fatal(err)
		}
		before, err := pgwork.Read(ctx, admin, schema)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, storeURL, Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		err = op.Run(ctx, s)
		s.Close()
		if err != nil {
			t.Fatalf("%s beside %d finished rows: %v", op.Name, finished, err)
		}
		if err := pgwork.Idle(ctx, admin, app); err != nil {
			t.Fatal(err)
		}
		after, err := pgwork.Read(ctx, admin, schema)
		if err != nil {
			t.Fatal(err)
		}
		out[op.Name] = after.Sub(before)
	}
	return out
}

// foldCounts folds the running counts' deltas (0024's fold_counts), and
// then empties tables (delta tables the fold has emptied of live rows:
// only their dead rows go), on a connection of its own (a counted one: its
// work is published when it ends, before the next measurement starts).
func foldCounts(ctx context.Context, url string, empty ...string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "SELECT fold_counts()"); err != nil {
		return err
	}
	for _, table := range empty {
		var live int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&live); err != nil {
			return err
		}
		if live != 0 {
			return fmt.Errorf("%s holds %d rows after a fold; it would be emptied of them", table, live)
		}
		if _, err := c.Exec(ctx, "TRUNCATE "+pgx.Identifier{table}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}
