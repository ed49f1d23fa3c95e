package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestCheckDecidesBeforeAnythingIsWritten: every refusal is the item's
// own error and comes from Check, before a Write exists, so a refused
// transition writes nothing.
func TestCheckDecidesBeforeAnythingIsWritten(t *testing.T) {
	lease := t0.Add(time.Minute)
	sending := Row{State: state.Sending, LeaseOwner: "d1", LeaseUntil: &lease}
	for _, c := range []struct {
		name string
		p    store.TransitionParams
		row  Row
		want error
	}{
		{"claim has its own method", store.TransitionParams{ID: "m1", From: state.Queued, Event: state.Event{Kind: state.Claim}},
			Row{State: state.Queued}, &store.InvalidError{}},
		{"enqueue has its own method", store.TransitionParams{ID: "m1", From: state.None, Event: state.Event{Kind: state.Enqueue}},
			Row{}, &store.InvalidError{}},
		{"the machine refuses accept on a queued row", store.TransitionParams{ID: "m1", From: state.Queued, Event: state.Event{Kind: state.Accept}},
			Row{State: state.Queued}, state.ErrRefused},
		{"a cancel of a sending row", store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Cancel}},
			sending, state.ErrRefused},
		{"the row moved on", store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Accept}, LeaseOwner: "d1"},
			Row{State: state.Sent}, store.ErrStale},
		{"another drain's lease", store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Accept}, LeaseOwner: "d2"},
			sending, store.ErrStale},
		{"an earlier lease of the same drain", store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Accept},
			LeaseOwner: "d1", LeaseUntil: lease.Add(-time.Second)}, sending, store.ErrStale},
		{"a takeover within the margin", store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.LeaseExpired},
			Now: lease.Add(store.TakeoverMargin - time.Second)}, sending, store.ErrLeaseLive},
		{"a verdict on a live lease", store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Resolve, Status: state.Sent}},
			sending, store.ErrLeaseLive},
	} {
		_, _, err := Check(&c.p, c.row, lease)
		var invalid *store.InvalidError
		switch {
		case err == nil:
			t.Errorf("%s: allowed", c.name)
		case errors.As(c.want, &invalid):
			if !errors.As(err, &invalid) || invalid.Field != "event" {
				t.Errorf("%s: %v, want an InvalidError on event", c.name, err)
			}
		case !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if err != nil && !store.IsItemError(err) {
			t.Errorf("%s: %v is not the item's own error", c.name, err)
		}
	}
}

func TestCheckAllowsTheLeaseHolderAndALateTakeover(t *testing.T) {
	lease := t0.Add(time.Minute)
	sending := Row{State: state.Sending, LeaseOwner: "d1", LeaseUntil: &lease}
	p := store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Accept}, LeaseOwner: "d1", LeaseUntil: lease}
	res, at, err := Check(&p, sending, time.Time{})
	if err != nil || !res.Applied || res.To != state.Sent || !at.IsZero() {
		t.Fatalf("accept: %+v at %v, %v; want sent at the store's clock", res, at, err)
	}
	over := lease.Add(store.TakeoverMargin)
	p = store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.LeaseExpired}, Now: over.Add(1500 * time.Nanosecond)}
	res, at, err = Check(&p, sending, t0)
	if err != nil || !res.Applied || res.To != state.Unknown || !at.Equal(over.Add(time.Microsecond)) {
		t.Fatalf("takeover: %+v at %v, %v; want unknown at p.Now at the store's resolution", res, at, err)
	}
	// After is the row a later item of the batch sees.
	if r := sending.After(res); r.State != state.Unknown || r.LeaseOwner != "" || r.LeaseUntil != nil {
		t.Errorf("after the takeover: %+v", r)
	}
	if r := sending.After(state.Result{To: state.Sending}); r != sending {
		t.Errorf("after nothing applied: %+v", r)
	}
}

func TestPlanWritesWhatTheMachineDecided(t *testing.T) {
	at := t0.Add(time.Second)
	lease := t0.Add(time.Minute + 1500*time.Nanosecond)
	att := &store.Attempt{StartedAt: t0.Add(1500 * time.Nanosecond), FinishedAt: at}
	p := &store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain,
		Detail: "503", LeaseOwner: "d1", LeaseUntil: lease, NextAttemptIn: 30 * time.Second, NoCall: false, LastError: "503",
		Attempt: att}
	res, err := Machine(p)
	if err != nil {
		t.Fatal(err)
	}
	w := Plan(p, res, at)
	if !w.Applied || w.State != state.Queued || !w.ClearLease || !w.Next || !w.NextAt.Equal(at.Add(30*time.Second)) || w.NextIn != 0 {
		t.Errorf("retry: %+v", w)
	}
	if w.LeaseOwner != "d1" || !w.LeaseUntil.Equal(t0.Add(time.Minute+time.Microsecond)) || w.LastError != "503" || w.ProviderID != "" {
		t.Errorf("retry's conditions and columns: %+v", w)
	}
	h := w.History
	if h.MessageID != "m1" || h.From != state.Sending || h.To != state.Queued || h.Event != "retry" || !h.Applied ||
		h.Source != store.SourceDrain || h.Detail != "503" || !h.At.Equal(at) {
		t.Errorf("history %+v", h)
	}
	if w.Attempt == nil || w.Attempt == att || w.Attempt.MessageID != "m1" || !w.Attempt.StartedAt.Equal(t0.Add(time.Microsecond)) {
		t.Errorf("attempt %+v, want a copy for m1 at the store's resolution", w.Attempt)
	}

	// Without a time of its own, the delay is left to the statement's clock.
	w = Plan(p, res, time.Time{})
	if !w.Next || !w.NextAt.IsZero() || w.NextIn != 30*time.Second {
		t.Errorf("retry at the store's clock: %+v", w)
	}

	// An accept leaves the queue alone; stale evidence changes no column.
	p = &store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Accept}, ProviderID: "wamid.1"}
	res, _ = Machine(p)
	if w := Plan(p, res, at); !w.Applied || w.State != state.Sent || !w.ClearLease || w.Next || w.ProviderID != "wamid.1" || w.Attempt != nil {
		t.Errorf("accept: %+v", w)
	}
	p = &store.TransitionParams{ID: "m1", From: state.Delivered, Event: state.Event{Kind: state.Evidence, Status: state.Sent}}
	res, err = Machine(p)
	if err != nil || res.Applied {
		t.Fatalf("late sent after delivered: %+v, %v", res, err)
	}
	if w := Plan(p, res, at); w.Applied || w.ClearLease || w.Next || w.History.Applied || w.History.Event != "evidence(sent)" {
		t.Errorf("stale evidence: %+v", w)
	}
}

func TestKeptRecordsTheLateWordAndTouchesNoRow(t *testing.T) {
	p := &store.TransitionParams{ID: "m1", From: state.Sending, Event: state.Event{Kind: state.Accept}, LeaseOwner: "d1",
		KeepIfStale: true, Attempt: &store.Attempt{}}
	r := Row{State: state.Unknown}
	k := Kept(p, r, t0)
	h := k.History
	if h.From != state.Unknown || h.To != state.Unknown || h.Applied || h.Event != "accept" || h.MessageID != "m1" || !h.At.Equal(t0) {
		t.Errorf("history %+v", h)
	}
	if h.Detail != store.StaleDetail(p, r.State, r.LeaseOwner, r.LeaseUntil) {
		t.Errorf("detail %q", h.Detail)
	}
	if k.Attempt == nil || k.Attempt.MessageID != "m1" {
		t.Errorf("attempt %+v", k.Attempt)
	}
}
