package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// enqueueDriver is a store's enqueue statements (rules.EnqueueDriver).
type enqueueDriver interface {
	EnqueueDriver() rules.EnqueueDriver
}

// testEnqueueStatements is the driver suite of the enqueue use case: each
// statement rules.EnqueueMany runs, alone, on the store: what it writes
// and what it answers, with no decision of its own.
func testEnqueueStatements(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.New(t, nil)
	dr, ok := s.(enqueueDriver)
	if !ok {
		t.Fatalf("%T has no EnqueueDriver", s)
	}
	d := dr.EnqueueDriver()
	now, err := d.EnqueueClock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	row := func(key string) rules.Pending {
		p := Params(key)
		p.Normalize()
		return rules.Pending{Msg: store.NewMessage(&p, d.NewID(now), now)}
	}
	history := func(id string) int {
		t.Helper()
		hs, err := s.MessageHistory(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(hs)
	}

	t.Run("InsertFresh writes one new row with its history, or nothing", func(t *testing.T) {
		r := row("fresh-1")
		fresh, err := d.InsertFresh(ctx, r.Msg, now)
		if err != nil {
			t.Fatal(err)
		}
		if !fresh {
			// A store without a one-row statement: nothing was written.
			if _, err := s.MessageGet(ctx, store.DefaultTenant, "fresh-1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("InsertFresh said false and wrote the row: %v", err)
			}
			return
		}
		if m, err := s.MessageGet(ctx, "", r.Msg.ID); err != nil || m.State != state.Queued || history(r.Msg.ID) != 1 {
			t.Fatalf("after InsertFresh: %+v, %v", m, err)
		}
		again := row("fresh-1")
		if fresh, err := d.InsertFresh(ctx, again.Msg, now); err != nil || fresh {
			t.Fatalf("InsertFresh of a taken key: %t, %v; want false", fresh, err)
		}
		if _, err := s.MessageGet(ctx, "", again.Msg.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("InsertFresh of a taken key wrote a row: %v", err)
		}
	})

	t.Run("InsertNew writes the free keys, FindKeys reads the others", func(t *testing.T) {
		taken := row("taken-1")
		if err := d.EnqueueTx(ctx, 1, func(tx rules.EnqueueTx) error {
			_, err := tx.InsertNew(ctx, []rules.Pending{taken}, now)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rows := []rules.Pending{row("new-1"), row("taken-1"), row("new-2")}
		var inserted map[string]bool
		var existing map[string]*store.Message
		var facts map[string]rules.Facts
		if err := d.EnqueueTx(ctx, len(rows), func(tx rules.EnqueueTx) error {
			var err error
			if inserted, err = tx.InsertNew(ctx, rows, now); err != nil {
				return err
			}
			if existing, err = tx.FindKeys(ctx, rows[1:2]); err != nil {
				return err
			}
			facts, err = tx.LockRevivable(ctx, []*store.Message{existing[rules.Key(store.DefaultTenant, "taken-1")]}, existing)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(inserted) != 2 || !inserted[rows[0].Msg.ID] || !inserted[rows[2].Msg.ID] {
			t.Fatalf("InsertNew wrote %v; want the two free keys", inserted)
		}
		for _, r := range []rules.Pending{rows[0], rows[2]} {
			if n := history(r.Msg.ID); n != 1 {
				t.Fatalf("%s has %d history entries; want its first", r.Msg.Key, n)
			}
		}
		m := existing[rules.Key(store.DefaultTenant, "taken-1")]
		if len(existing) != 1 || m == nil || m.ID != taken.Msg.ID {
			t.Fatalf("FindKeys found %v; want taken-1's row %s", existing, taken.Msg.ID)
		}
		if f, ok := facts[m.ID]; !ok || f.Holds || f.Called {
			t.Fatalf("facts of a queued row never called: %+v (%t)", f, ok)
		}
	})

	t.Run("a transaction that fails writes nothing", func(t *testing.T) {
		r := row("rolled-back")
		boom := errors.New("boom")
		err := d.EnqueueTx(ctx, 1, func(tx rules.EnqueueTx) error {
			if _, err := tx.InsertNew(ctx, []rules.Pending{r}, now); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("EnqueueTx returned %v; want fn's error", err)
		}
		if _, err := s.MessageGet(ctx, "", r.Msg.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a rolled-back InsertNew left its row: %v", err)
		}
	})

	t.Run("CountRefused adds to the running counts", func(t *testing.T) {
		before, err := s.Stats(ctx, &store.StatsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.EnqueueTx(ctx, 0, func(tx rules.EnqueueTx) error { return tx.CountRefused(ctx, now, 3, 2) }); err != nil {
			t.Fatal(err)
		}
		after, err := s.Stats(ctx, &store.StatsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if after.KeyReplays-before.KeyReplays != 3 || after.KeyConflicts-before.KeyConflicts != 2 {
			t.Fatalf("replays %d -> %d, conflicts %d -> %d; want +3 and +2", before.KeyReplays, after.KeyReplays,
				before.KeyConflicts, after.KeyConflicts)
		}
	})
}

// challengeDriver is a store's challenge enqueue statements.
type challengeDriver interface {
	ChallengeDriver() rules.ChallengeDriver
}

// testChallengeStatements is the driver suite of the challenge enqueue
// use case: its statements alone, on the store.
func testChallengeStatements(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.New(t, nil)
	dr, ok := s.(challengeDriver)
	if !ok {
		t.Fatalf("%T has no ChallengeDriver", s)
	}
	d := dr.ChallengeDriver()
	now, err := d.EnqueueClock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := challengeParams("stmt-1")
	c, msgs, err := rules.ChallengeBuild(&p, now, d.NewID)
	if err != nil {
		t.Fatal(err)
	}
	single := Params("held-by-a-send")
	must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &single))
	err = d.ChallengeTx(ctx, func(tx rules.ChallengeTx) error {
		if ok, err := tx.ChallengeInsert(ctx, c, now); err != nil || !ok {
			t.Errorf("ChallengeInsert of a new key: %t, %v", ok, err)
		}
		if ok, err := tx.ChallengeInsert(ctx, c, now); err != nil || ok {
			t.Errorf("ChallengeInsert of a taken key: %t, %v; want false", ok, err)
		}
		if got, err := tx.ChallengeByKey(ctx, c.Tenant, c.Key, true); err != nil || got == nil || got.ID != c.ID {
			t.Errorf("ChallengeByKey: %+v, %v; want %s", got, err, c.ID)
		}
		if got, err := tx.ChallengeByKey(ctx, c.Tenant, "none", false); err != nil || got != nil {
			t.Errorf("ChallengeByKey of no challenge: %+v, %v; want nil", got, err)
		}
		for i, m := range msgs {
			if ok, err := tx.MessageInsertOne(ctx, m, now); err != nil || !ok {
				t.Errorf("MessageInsertOne: %t, %v", ok, err)
			}
			if err := tx.StepInsert(ctx, c.ID, c.Steps[i], m); err != nil {
				t.Error(err)
			}
		}
		if err := tx.CreationHistory(ctx, msgs, now); err != nil {
			t.Error(err)
		}
		taken := *msgs[0]
		taken.ID, taken.Key = d.NewID(now), "held-by-a-send"
		if ok, err := tx.MessageInsertOne(ctx, &taken, now); err != nil || ok {
			t.Errorf("MessageInsertOne of a key a send holds: %t, %v; want false", ok, err)
		}
		if id, err := tx.MessageIDByKey(ctx, store.DefaultTenant, "held-by-a-send"); err != nil || id == "" {
			t.Errorf("MessageIDByKey: %q, %v", id, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ChallengeGet(ctx, store.DefaultTenant, "stmt-1")
	if err != nil || len(got.Steps) != len(msgs) {
		t.Fatalf("the challenge written: %+v, %v; want %d steps", got, err, len(msgs))
	}
	for _, m := range msgs {
		if hs, err := s.MessageHistory(ctx, m.ID); err != nil || len(hs) != 1 {
			t.Fatalf("step message %s: %d history entries, %v; want its first", m.ID, len(hs), err)
		}
	}
}

// tickDriver is a store's challenge tick statements.
type tickDriver interface {
	TickDriver() rules.TickDriver
}

// testTickStatements is the driver suite of the challenge tick use case:
// its statements alone, on the store.
func testTickStatements(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.New(t, nil)
	dr, ok := s.(tickDriver)
	if !ok {
		t.Fatalf("%T has no TickDriver", s)
	}
	d := dr.TickDriver()
	p := challengeParams("tick-1")
	c := must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p)).Challenge
	if len(c.Steps) < 2 {
		t.Fatalf("the test's challenge has %d steps; want two at least", len(c.Steps))
	}
	now, err := d.TickClock(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	second := c.Steps[1]
	plan := rules.TickPlan{Outcome: "open", Why: "a test's plan", By: 0, Blocked: 2}
	err = d.TickTx(ctx, func(tx rules.TickTx) error {
		got, err := tx.ChallengeOpen(ctx, c.ID)
		if err != nil || got == nil || got.ID != c.ID || len(got.Steps) != len(c.Steps) {
			t.Errorf("ChallengeOpen: %+v, %v", got, err)
		}
		if none, err := tx.ChallengeOpen(ctx, "no-such-challenge"); err != nil || none != nil {
			t.Errorf("ChallengeOpen of no challenge: %+v, %v; want nil", none, err)
		}
		if ok, err := tx.StepRelease(ctx, c.ID, second.Step, second.Message.ID, now); err != nil || !ok {
			t.Errorf("StepRelease of a queued step: %t, %v", ok, err)
		}
		if ok, err := tx.StepCancel(ctx, rules.StepCancel{Step: second.Step, ID: second.Message.ID, Detail: "a test's cancel"}, store.SourceSend, now); err != nil || !ok {
			t.Errorf("StepCancel of a queued step: %t, %v", ok, err)
		}
		if ok, err := tx.StepRelease(ctx, c.ID, second.Step, second.Message.ID, now); err != nil || ok {
			t.Errorf("StepRelease of a step no longer queued: %t, %v; want false", ok, err)
		}
		if err := tx.StepWhy(ctx, c.ID, second.Step, "a test's why"); err != nil {
			t.Error(err)
		}
		if err := tx.StepsSeen(ctx, c.ID); err != nil {
			t.Error(err)
		}
		return tx.ChallengeUpdate(ctx, c.ID, plan, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ChallengeGet(ctx, store.DefaultTenant, "tick-1")
	if err != nil {
		t.Fatal(err)
	}
	st := got.Steps[1]
	if !st.Released || st.Why != "a test's why" || st.Message.State != state.Failed || got.Why != "a test's plan" || got.Blocked != 2 {
		t.Fatalf("after the tick's statements: challenge %+v, step %+v", got, st)
	}
}
