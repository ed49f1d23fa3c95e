package challenge

import (
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/state"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// emailThenSMS is the example: an email now, an SMS fallback after
// two minutes, a ten-minute deadline.
func emailThenSMS(first, second state.State, firstReason state.Reason, secondReleased bool) []Step {
	return []Step{
		{State: first, Reason: firstReason, At: t0, Released: true},
		{State: second, At: t0.Add(2 * time.Minute), Released: secondReleased},
	}
}

var deadline = Options{Deadline: t0.Add(10 * time.Minute)}

func TestDecide(t *testing.T) {
	cases := []struct {
		name  string
		steps []Step
		now   time.Time
		opt   Options
		want  Decision
	}{
		{"before the fallback time only the first step is eligible",
			emailThenSMS(state.Queued, state.Queued, "", false), t0.Add(time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: -1, Blocked: -1, Next: t0.Add(2 * time.Minute)}},
		{"a first step still queued at the fallback time is canceled as the next is released",
			emailThenSMS(state.Queued, state.Queued, "", false), t0.Add(2 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: 1, Blocked: -1, Next: t0.Add(10 * time.Minute),
				Cancel: []Cancel{{0, "fallback to step 2: this step had not gone out"}}}},
		{"a held step canceled before its release is passed over: the next one's time decides",
			[]Step{{State: state.Failed, Reason: state.Permanent, Released: true, At: t0},
				{State: state.Failed, Reason: state.Canceled, At: t0.Add(2 * time.Minute)},
				{State: state.Queued, At: t0.Add(4 * time.Minute)}}, t0.Add(5 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: 2, Blocked: -1, Next: t0.Add(10 * time.Minute)}},
		{"a held step a drain took when it came due counts as out: it blocks the next",
			[]Step{{State: state.Failed, Reason: state.Permanent, Released: true, At: t0},
				{State: state.Sending, At: t0.Add(2 * time.Minute)},
				{State: state.Queued, At: t0.Add(4 * time.Minute)}}, t0.Add(5 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: -1, Blocked: 1, Next: t0.Add(10 * time.Minute),
				Why: "fallback to step 3 held: step 2 is sending and may have reached the customer"}},
		{"a first step that failed at the provider releases the fallback",
			emailThenSMS(state.Failed, state.Queued, state.Permanent, false), t0.Add(3 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: 1, Blocked: -1, Next: t0.Add(10 * time.Minute)}},
		{"an opted-out first step releases the fallback",
			emailThenSMS(state.Failed, state.Queued, state.OptedOut, false), t0.Add(3 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: 1, Blocked: -1, Next: t0.Add(10 * time.Minute)}},
		{"a sending first step blocks the fallback",
			emailThenSMS(state.Sending, state.Queued, "", false), t0.Add(3 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: -1, Blocked: 0, Next: t0.Add(10 * time.Minute),
				Why: "fallback to step 2 held: step 1 is sending and may have reached the customer"}},
		{"an unknown first step blocks the fallback",
			emailThenSMS(state.Unknown, state.Queued, "", false), t0.Add(3 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: -1, Blocked: 0, Next: t0.Add(10 * time.Minute),
				Why: "fallback to step 2 held: step 1 is unknown and may have reached the customer"}},
		{"accepting the duplicate risk releases past an unknown step",
			emailThenSMS(state.Unknown, state.Queued, "", false), t0.Add(3 * time.Minute),
			Options{Deadline: t0.Add(10 * time.Minute), AcceptDuplicateRisk: true},
			Decision{Outcome: Open, By: -1, Release: 1, Blocked: -1, Next: t0.Add(10 * time.Minute)}},
		{"a sent first step ends the challenge and cancels the fallback",
			emailThenSMS(state.Sent, state.Queued, "", false), t0.Add(3 * time.Minute), deadline,
			Decision{Outcome: Completed, By: 0, Release: -1, Blocked: -1,
				Cancel: []Cancel{{1, "challenge completed: step 1 was accepted by the provider"}}}},
		{"with FallbackUndelivered a sent step without delivery falls back at the step's time",
			emailThenSMS(state.Sent, state.Queued, "", false), t0.Add(3 * time.Minute),
			Options{Deadline: t0.Add(10 * time.Minute), FallbackUndelivered: true},
			Decision{Outcome: Open, By: -1, Release: 1, Blocked: -1, Next: t0.Add(10 * time.Minute)}},
		{"a delivered step completes the challenge even with FallbackUndelivered",
			emailThenSMS(state.Delivered, state.Queued, "", false), t0.Add(3 * time.Minute),
			Options{Deadline: t0.Add(10 * time.Minute), FallbackUndelivered: true},
			Decision{Outcome: Completed, By: 0, Release: -1, Blocked: -1,
				Cancel: []Cancel{{1, "challenge completed: step 1 was delivered"}}}},
		{"a delivered fallback completes it and the read first step is not needed",
			emailThenSMS(state.Failed, state.Read, state.Exhausted, true), t0.Add(4 * time.Minute), deadline,
			Decision{Outcome: Completed, By: 1, Release: -1, Blocked: -1}},
		{"at the deadline nothing is released and what is queued is canceled",
			emailThenSMS(state.Queued, state.Queued, "", false), t0.Add(10 * time.Minute), deadline,
			Decision{Outcome: Expired, By: -1, Release: -1, Blocked: -1,
				Cancel: []Cancel{{0, "challenge deadline passed"}, {1, "challenge deadline passed"}}}},
		{"past the deadline an unknown step stays as it is and the challenge is expired",
			emailThenSMS(state.Unknown, state.Queued, "", false), t0.Add(11 * time.Minute), deadline,
			Decision{Outcome: Expired, By: -1, Release: -1, Blocked: -1,
				Cancel: []Cancel{{1, "challenge deadline passed"}}}},
		{"every step failed: the challenge failed",
			emailThenSMS(state.Failed, state.Failed, state.Permanent, true), t0.Add(4 * time.Minute), deadline,
			Decision{Outcome: Failed, By: -1, Release: -1, Blocked: -1}},
		{"the last step released and pending: decide again at the deadline",
			emailThenSMS(state.Failed, state.Sending, state.Permanent, true), t0.Add(4 * time.Minute), deadline,
			Decision{Outcome: Open, By: -1, Release: -1, Blocked: -1, Next: t0.Add(10 * time.Minute)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(c.steps, c.now, c.opt)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Decide\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

// TestAChallengeNeverPromptsTwice drives challenges of two to four steps
// through random worlds: drains claim released steps, providers answer
// (accepted, failed, ambiguous), evidence arrives, time passes, and Decide
// runs between any two events, its decision applied as the store would
// (releases, and cancels through the state machine). Whatever happens:
// no step is released while an earlier one may have reached the customer
// (unless the risk is accepted), nothing is released or called at or
// after the deadline, and a completed challenge releases nothing more.
func TestAChallengeNeverPromptsTwice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 4).Draw(t, "steps")
		steps := make([]Step, n)
		for i := range steps {
			steps[i] = Step{State: state.Queued, At: t0.Add(time.Duration(i*2) * time.Minute), Released: i == 0}
		}
		opt := Options{Deadline: t0.Add(time.Duration(rapid.IntRange(1, 12).Draw(t, "deadline min")) * time.Minute)}
		now := t0
		completed := false
		apply := func(from state.State, ev state.Event) (state.State, state.Reason, bool) {
			res, err := state.Transition(from, ev)
			if err != nil || !res.Applied {
				return from, "", false
			}
			return res.To, res.Reason, true
		}
		for range rapid.IntRange(1, 40).Draw(t, "events") {
			switch rapid.IntRange(0, 3).Draw(t, "what") {
			case 0: // time passes
				now = now.Add(time.Duration(rapid.IntRange(1, 120).Draw(t, "seconds")) * time.Second)
			case 1: // a drain claims a released queued step, never at or after the deadline
				i := rapid.IntRange(0, n-1).Draw(t, "claim")
				if steps[i].Released && steps[i].State == state.Queued && now.Before(opt.Deadline) {
					steps[i].State, _, _ = apply(steps[i].State, state.Event{Kind: state.Claim})
				}
			case 2: // the provider answers a sending step
				i := rapid.IntRange(0, n-1).Draw(t, "answer")
				if steps[i].State == state.Sending {
					ev := rapid.SampledFrom([]state.Event{{Kind: state.Accept}, {Kind: state.Ambiguous},
						{Kind: state.Fail, Reason: state.Permanent}, {Kind: state.Fail, Reason: state.OptedOut}}).Draw(t, "answer event")
					steps[i].State, steps[i].Reason, _ = apply(steps[i].State, ev)
				}
			case 3: // evidence for a step that went out
				i := rapid.IntRange(0, n-1).Draw(t, "evidence")
				if steps[i].State == state.Sent || steps[i].State == state.Unknown {
					st := rapid.SampledFrom([]state.State{state.Sent, state.Delivered, state.Read}).Draw(t, "status")
					if to, _, ok := apply(steps[i].State, state.Event{Kind: state.Evidence, Status: st}); ok {
						steps[i].State = to
					}
				}
			}
			d := Decide(steps, now, opt)
			if completed && d.Release >= 0 {
				t.Fatalf("a completed challenge released step %d", d.Release)
			}
			for _, c := range d.Cancel {
				if steps[c.Step].State != state.Queued {
					t.Fatalf("Decide canceled step %d in state %s", c.Step, steps[c.Step].State)
				}
				steps[c.Step].State, steps[c.Step].Reason, _ = apply(state.Queued, state.Event{Kind: state.Cancel})
			}
			if d.Release >= 0 {
				if !now.Before(opt.Deadline) {
					t.Fatalf("released step %d at or after the deadline", d.Release)
				}
				for i := 0; i < d.Release; i++ {
					if steps[i].State != state.Failed {
						t.Fatalf("released step %d while step %d is %s: it may have reached the customer", d.Release, i, steps[i].State)
					}
				}
				if steps[d.Release].Released {
					t.Fatalf("released step %d twice", d.Release)
				}
				steps[d.Release].Released = true
			}
			if d.Outcome == Completed {
				completed = true
			}
		}
		// At most one step may have reached the customer.
		out := 0
		for _, s := range steps {
			if s.State != state.Queued && s.State != state.Failed {
				out++
			}
		}
		if out > 1 {
			t.Fatalf("%d steps may have reached the customer: %+v", out, steps)
		}
	})
}
