package state

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// row is a model row: its state and, when failed, its reason.
type row struct {
	state  State
	reason Reason
}

// practicalStarts are the rows provider evidence can meet in practice.
var practicalStarts = []row{
	{Queued, NoReason},
	{Sending, NoReason},
	{Unknown, NoReason},
	{Sent, NoReason},
	{Failed, Permanent},
	{Delivered, NoReason},
	{Read, NoReason},
}

// providerStatuses are the statuses a provider reports.
var providerStatuses = []State{Sent, Delivered, Read, Failed}

// applyEvidence feeds statuses to r through Transition, checking the
// forward-only rules at every step, and returns where r ends.
func applyEvidence(t *rapid.T, r row, statuses []State) row {
	for _, st := range statuses {
		ev := evidenceOf(st)
		res, err := Transition(r.state, ev)
		if err != nil {
			t.Fatalf("%s on %s refused: %v", ev, r.state, err)
		}
		if res.Applied {
			if res.To.Rank() <= r.state.Rank() {
				t.Fatalf("%s moved %s (rank %d) to %s (rank %d): not forward",
					ev, r.state, r.state.Rank(), res.To, res.To.Rank())
			}
			if res.To == Failed && (r.state == Delivered || r.state == Read) {
				t.Fatalf("a stale failure overwrote %s", r.state)
			}
			if res.To == Failed && res.Reason != Permanent {
				t.Fatalf("failed evidence on %s gave reason %q; want permanent", r.state, res.Reason)
			}
			if res.To != Failed && res.Reason != NoReason {
				t.Fatalf("%s on %s gave reason %q to a %s row", ev, r.state, res.Reason, res.To)
			}
		} else if res.To != r.state {
			t.Fatalf("%s on %s was not applied but returned To=%s", ev, r.state, res.To)
		}
		if r.state.Finished() && !res.To.Finished() {
			t.Fatalf("%s moved finished %s to unfinished %s", ev, r.state, res.To)
		}
		if res.Applied {
			r = row{res.To, res.Reason}
		}
	}
	return r
}

func TestPropertyEvidenceOnlyMovesForward(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.SampledFrom(practicalStarts).Draw(t, "start")
		statuses := rapid.SliceOfN(rapid.SampledFrom(providerStatuses), 1, 30).Draw(t, "statuses")
		applyEvidence(t, start, statuses)
	})
}

func TestPropertyEvidenceEndsAtTheHighestRankWhateverTheOrder(t *testing.T) {
	t.Parallel()
	// Webhooks arrive out of order and more than once; the row must end the
	// same way however they arrive: at the highest-ranked status seen.
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.SampledFrom(practicalStarts).Draw(t, "start")
		statuses := rapid.SliceOfN(rapid.SampledFrom(providerStatuses), 1, 12).Draw(t, "statuses")
		shuffled := rapid.Permutation(statuses).Draw(t, "shuffled")

		a := applyEvidence(t, start, statuses)
		b := applyEvidence(t, start, shuffled)
		if a != b {
			t.Fatalf("order matters: %v ends %+v, %v ends %+v", statuses, a, shuffled, b)
		}
		top := start.state
		for _, st := range statuses {
			if st.Rank() > top.Rank() {
				top = st
			}
		}
		if a.state != top {
			t.Fatalf("ended %s; want the highest-ranked of the start and the evidence, %s", a.state, top)
		}
	})
}

// anyEvent draws from every event in the matrix plus a few malformed ones.
var anyEvent = rapid.SampledFrom(append(slices.Clone(allEvents),
	Event{Kind: "teleport"},
	Event{Kind: Claim, Status: Sent},
	Event{Kind: Cancel, Reason: Permanent},
))

// nextEvent draws the next event for a row in state from: usually one the
// machine applies there, choosing the kind first so that rare moves (claim,
// ambiguous, lease_expired) are as likely as the many evidence statuses and
// random walks reach deep states such as unknown; otherwise any event at all,
// to exercise refusals and stale evidence.
func nextEvent(t *rapid.T, from State) Event {
	if rapid.IntRange(0, 3).Draw(t, "pick") == 0 {
		return anyEvent.Draw(t, "any event")
	}
	byKind := map[Kind][]Event{}
	var kinds []Kind
	for _, ev := range allEvents {
		if res, err := Transition(from, ev); err == nil && res.Applied {
			if byKind[ev.Kind] == nil {
				kinds = append(kinds, ev.Kind)
			}
			byKind[ev.Kind] = append(byKind[ev.Kind], ev)
		}
	}
	if len(kinds) == 0 { // read: nothing moves it
		return anyEvent.Draw(t, "any event")
	}
	kind := rapid.SampledFrom(kinds).Draw(t, "kind")
	return rapid.SampledFrom(byKind[kind]).Draw(t, "event")
}

func TestPropertyAnyEventSequenceKeepsTheRules(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		// Several rows a check: most walks end early in read, which nothing
		// leaves, so one row a check rarely gets as far as unknown.
		for range rapid.IntRange(1, 8).Draw(t, "rows") {
			walkFromNone(t, rapid.IntRange(1, 40).Draw(t, "steps"))
		}
	})
}

// walkFromNone drives one row from None through steps random events,
// checking the machine's rules at every step.
func walkFromNone(t *rapid.T, steps int) {
	r := row{None, NoReason}
	beenUnknown := false
	for i := range steps {
		ev := nextEvent(t, r.state)
		if ev.Kind == Revive {
			// The store tells the machine the row's own reason, as it
			// does for a real revive.
			ev.Reason = r.reason
		}
		res, err := Transition(r.state, ev)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("step %d: %s on %q: error %v does not match ErrRefused", i, ev, r.state, err)
			}
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("step %d: error %T is not a *RefusedError", i, err)
			}
			if res != (Result{}) {
				t.Fatalf("step %d: refusal came with result %+v", i, res)
			}
			continue // a refused event leaves the row as it was
		}
		if !res.Applied {
			if ev.Kind != Evidence {
				t.Fatalf("step %d: only evidence is recorded without being applied, got %s on %s", i, ev, r.state)
			}
			if res.To != r.state {
				t.Fatalf("step %d: %s on %s not applied but To=%s", i, ev, r.state, res.To)
			}
			continue
		}
		from, to := r.state, res.To
		if from != None && to.Rank() < from.Rank() {
			retried := from == Sending && to == Queued && (ev.Kind == Retry || ev.Kind == LeaseRequeue)
			revived := from == Failed && to == Queued && ev.Kind == Revive && r.reason.Policy()
			if !retried && !revived {
				t.Fatalf("step %d: backward move %s(%s) -> %s on %s; only sending -> queued on retry or lease_requeue, and failed(opted_out) -> queued on revive, are allowed", i, from, r.reason, to, ev)
			}
		}
		if from.Finished() && ev.Kind == Revive {
			// A policy refusal went nowhere: the one finished row that may
			// become unfinished again (checked just above).
			r = row{to, res.Reason}
			continue
		}
		if from.Finished() {
			if ev.Kind != Evidence {
				t.Fatalf("step %d: finished %s changed on %s; only evidence may move a finished row", i, from, ev)
			}
			if to.Rank() <= from.Rank() {
				t.Fatalf("step %d: finished %s moved to %s, not forward", i, from, to)
			}
		}
		if from == Unknown && ev.Kind != Evidence && ev.Kind != Resolve {
			t.Fatalf("step %d: unknown left on %s; only evidence or an operator's verdict may move it", i, ev)
		}
		if to == Sending && ev.Kind != Claim {
			t.Fatalf("step %d: %s entered sending on %s; only a claim starts a provider call", i, from, ev)
		}
		if to == Sending && (beenUnknown || from.Finished()) {
			t.Fatalf("step %d: a row that may have gone out (was unknown or finished) is being sent again", i)
		}
		if from.Finished() && !to.Finished() {
			t.Fatalf("step %d: finished %s became unfinished %s on %s", i, from, to, ev)
		}
		if from == None && ev.Kind != Enqueue && ev.Kind != TakeIn {
			t.Fatalf("step %d: %s created a row", i, ev)
		}
		if to == Intake && from != None {
			t.Fatalf("step %d: %s went back to intake on %s; a row is taken in only when it is created", i, from, ev)
		}
		if from == Intake && to != Queued && !(to == Failed && (res.Reason == Invalid || res.Reason == Expired || res.Reason == Canceled)) {
			t.Fatalf("step %d: intake left for %s(%s) on %s; only admission (queued), invalid, expiry or a cancel may move it", i, to, res.Reason, ev)
		}

		r = row{to, res.Reason}
		if r.state == Unknown {
			beenUnknown = true
		}
		if (r.reason != NoReason) != (r.state == Failed) {
			t.Fatalf("step %d: state %s with reason %q; a reason is set iff the row is failed", i, r.state, r.reason)
		}
		if r.state == Failed && !r.reason.Valid() {
			t.Fatalf("step %d: failed with invalid reason %q", i, r.reason)
		}
		if !r.state.Valid() {
			t.Fatalf("step %d: %s on %s produced invalid state %q", i, ev, from, r.state)
		}
	}
}

func TestPropertyRefusalsAreTheOnlyErrors(t *testing.T) {
	t.Parallel()
	// Any state string and any event: Transition either decides or refuses
	// with a *RefusedError; it never panics or returns another error.
	rapid.Check(t, func(t *rapid.T) {
		from := rapid.OneOf(
			rapid.SampledFrom(withNone(All)),
			rapid.Map(rapid.String(), func(s string) State { return State(s) }),
		).Draw(t, "from")
		ev := Event{
			Kind:   rapid.OneOf(rapid.SampledFrom([]Kind{Enqueue, TakeIn, Admit, Claim, Accept, Retry, Ambiguous, Fail, Cancel, LeaseExpired, LeaseRequeue, Evidence, Resolve, Revive}), rapid.Map(rapid.String(), func(s string) Kind { return Kind(s) })).Draw(t, "kind"),
			Status: rapid.OneOf(rapid.SampledFrom(withNone(All)), rapid.Map(rapid.String(), func(s string) State { return State(s) })).Draw(t, "status"),
			Reason: rapid.OneOf(rapid.SampledFrom([]Reason{NoReason, Permanent, Expired, Exhausted, Canceled, Resolved, OptedOut, Invalid}), rapid.Map(rapid.String(), func(s string) Reason { return Reason(s) })).Draw(t, "reason"),
		}
		res, err := Transition(from, ev)
		if err != nil {
			var re *RefusedError
			if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Transition(%q, %+v) returned %T %v; want a *RefusedError", from, ev, err, err)
			}
			return
		}
		if !res.To.Valid() {
			t.Fatalf("Transition(%q, %+v) = %+v: not a valid state", from, ev, res)
		}
		if res.Applied && (res.Reason != NoReason) != (res.To == Failed) {
			t.Fatalf("Transition(%q, %+v) = %+v: reason set iff failed", from, ev, res)
		}
	})
}
