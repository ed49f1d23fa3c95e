package postgres

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// The counts 0024 keeps (state_counts and counters, from deltas folded
// now and then) must be the rows' own counts at every moment, whatever
// concurrent writers and folds do: Stats reads them instead of the rows.
// Several drains enqueue, claim and record outcomes at once (some rows
// flagged maybe_sent, some resends) while folds run from the triggers and
// from outside; then every kept count is compared with a count of the
// rows.
func TestKeptCountsAreTheRowsCountsUnderConcurrentWriters(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := open(t, url, freshSchema(t, url), Options{})
	// The triggers fold when a delta takes a multiple of 1024: start
	// near one, so that they fold during the run as well as the folder
	// below.
	if _, err := h.pool.Exec(ctx, "SELECT setval('count_deltas_seq', 1000)"); err != nil {
		t.Fatal(err)
	}

	const workers, rounds = 4, 30
	var wg sync.WaitGroup
	var done atomic.Bool
	var folds atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if _, err := h.pool.Exec(ctx, "SELECT fold_counts()"); err != nil {
				t.Errorf("fold: %v", err)
				return
			}
			folds.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var writers sync.WaitGroup
	for w := range workers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			owner := fmt.Sprintf("drain-%d", w)
			var last string
			for r := range rounds {
				ps := make([]store.EnqueueParams, 8)
				for i := range ps {
					ps[i] = store.EnqueueParams{Tenant: store.DefaultTenant, Key: fmt.Sprintf("w%d-r%d-%d", w, r, i),
						To: fmt.Sprintf("+1555%03d%04d", w, r*10+i), Channel: store.ChannelWhatsApp, Identity: fmt.Sprintf("id%d", i%2),
						Payload: store.Payload{Text: "hi"}}
					if i == 0 && last != "" {
						ps[i].ResendOf = last
					}
				}
				res, err := h.MessageEnqueueMany(ctx, ps)
				if err != nil {
					t.Errorf("enqueue: %v", err)
					return
				}
				last = res[1].Message.ID
				cl, err := h.MessageClaim(ctx, &store.ClaimParams{Owner: owner, LeaseFor: time.Minute, Limit: 6})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				var tps []store.TransitionParams
				for i, c := range cl {
					p := store.TransitionParams{ID: c.ID, From: state.Sending, Source: store.SourceDrain, LeaseOwner: owner}
					switch i % 3 {
					case 0:
						p.Event, p.ProviderID = state.Event{Kind: state.Accept}, "wamid."+c.ID
					case 1:
						p.Event, p.MaybeSent = state.Event{Kind: state.Ambiguous}, true
					default:
						p.Event = state.Event{Kind: state.Fail, Reason: state.Permanent}
					}
					tps = append(tps, p)
				}
				if _, err := h.MessageTransitionMany(ctx, tps); err != nil {
					t.Errorf("outcomes: %v", err)
					return
				}
			}
		}()
	}
	writers.Wait()
	done.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}

	st, err := h.Stats(ctx, &store.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, c := range st.Counts {
		kept = append(kept, fmt.Sprintf("%s/%s=%d", c.Identity, c.State, c.N))
	}
	rows := countRows(t, h, "SELECT identity || '/' || state, count(*) FROM messages GROUP BY 1")
	if fmt.Sprint(kept) != fmt.Sprint(rows) {
		t.Errorf("kept counts by state %v, rows %v", kept, rows)
	}
	var maybe []string
	for s, n := range st.MaybeSent {
		maybe = append(maybe, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(maybe)
	if want := countRows(t, h, "SELECT state, count(*) FROM messages WHERE maybe_sent GROUP BY 1"); len(want) == 0 ||
		fmt.Sprint(maybe) != fmt.Sprint(want) {
		t.Errorf("kept maybe_sent %v, rows %v", maybe, want)
	}
	if want := countRows(t, h, "SELECT 'resends', count(*) FROM messages WHERE resend_of <> ''"); fmt.Sprint([]string{fmt.Sprintf("resends=%d", st.Resends)}) != fmt.Sprint(want) || st.Resends == 0 {
		t.Errorf("kept resends %d, rows %v", st.Resends, want)
	}
	// The triggers folded too: a fresh schema's state_counts has rows
	// only from folds, and the sequence passed a multiple of 1024.
	var folded int
	var seq int64
	if err := h.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM state_counts), (SELECT last_value FROM count_deltas_seq)").
		Scan(&folded, &seq); err != nil || folded == 0 || folds.Load() == 0 || seq < 1024 {
		t.Errorf("%d state_counts rows after %d folds, deltas up to %d (%v): nothing was folded", folded, folds.Load(), seq, err)
	}
}

// countRows runs a (name, count) query and returns "name=count", sorted.
func countRows(t *testing.T, h *handle, q string) []string {
	t.Helper()
	rs, err := h.pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rs.Next() {
		var k string
		var n int
		if err := rs.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// A transaction that is not READ COMMITTED (an application calling the
// SQL enqueue function in its own REPEATABLE READ or SERIALIZABLE
// transaction) never folds: a delta another fold deleted after its
// snapshot would fail it. Its own deltas wait for the next fold, and the
// counts stay exact.
func TestNoFoldInARepeatableReadTransaction(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := open(t, url, freshSchema(t, url), Options{})
	if _, err := h.MessageEnqueue(ctx, &store.EnqueueParams{Tenant: store.DefaultTenant, Key: "k1", To: "+15551230000",
		Channel: store.ChannelWhatsApp, Identity: "sim", Payload: store.Payload{Text: "hi"}}); err != nil {
		t.Fatal(err)
	}
	deltas := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int {
		var n int
		if err := q.QueryRow(ctx, "SELECT count(*) FROM state_count_deltas").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if deltas(h.pool) == 0 {
		t.Fatal("an enqueue wrote no delta")
	}
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		tx, err := h.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT fold_counts()"); err != nil {
			t.Fatalf("%s: fold: %v", iso, err)
		}
		if n := deltas(tx); n == 0 {
			t.Errorf("%s: a fold ran", iso)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.pool.Exec(ctx, "SELECT fold_counts()"); err != nil {
		t.Fatal(err)
	}
	if n := deltas(h.pool); n != 0 {
		t.Errorf("%d deltas left after a READ COMMITTED fold", n)
	}
	st, err := h.Stats(ctx, &store.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Counts) != 1 || st.Counts[0].N != 1 || st.Counts[0].State != state.Queued {
		t.Errorf("counts %+v, want one queued row", st.Counts)
	}
}
