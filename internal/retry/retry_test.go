package retry

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/state"
)

// now is the fixed clock every decision test runs at.
var now = time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)

// table returns a Table on the default policy (base 5s, factor 2, cap 5m,
// 8 attempts) with a fixed clock and Rand always returning r.
func table(r float64) Table {
	return Table{
		Policy: DefaultPolicy(),
		Now:    func() time.Time { return now },
		Rand:   func() float64 { return r },
	}
}

func TestParseClass(t *testing.T) {
	t.Parallel()
	for _, c := range []Class{Accepted, RateLimited, Transient, Ambiguous, Permanent, Identity} {
		t.Run("the class "+string(c)+" parses to itself", func(t *testing.T) {
			t.Parallel()
			got, err := ParseClass(string(c))
			if err != nil || got != c {
				t.Fatalf("ParseClass(%q) = %q, %v; want %q, nil", c, got, err, c)
			}
		})
	}
	for _, s := range []string{"", "Accepted", "retry", " transient"} {
		t.Run(fmt.Sprintf("the string %q is refused with the valid names", s), func(t *testing.T) {
			t.Parallel()
			got, err := ParseClass(s)
			if err == nil {
				t.Fatalf("ParseClass(%q) = %q, nil; want an error", s, got)
			}
			if !strings.Contains(err.Error(), "rate_limited") {
				t.Errorf("error %q does not name the valid classes", err)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	const r = 0.5 // Backoff(1) = 2.5s, Backoff(2) = 5s, Backoff(3) = 10s
	last := DefaultPolicy().MaxAttempts
	none := time.Time{}
	tests := []struct {
		name     string
		o        Outcome
		attempts int
		expires  time.Time
		want     Decision
	}{
		{"accepted marks the row sent", Outcome{Class: Accepted}, 1, none,
			Decision{Action: MarkSent}},
		{"accepted marks the row sent even past its deadline, since it went out", Outcome{Class: Accepted}, last, now.Add(-time.Hour),
			Decision{Action: MarkSent}},
		{"permanent fails the row as permanent on the first attempt", Outcome{Class: Permanent}, 1, none,
			Decision{Action: MarkFailed, Reason: state.Permanent}},
		{"permanent ignores a stated retry delay", Outcome{Class: Permanent, RetryAfter: time.Minute, Idempotent: true}, 1, none,
			Decision{Action: MarkFailed, Reason: state.Permanent}},
		{"transient requeues after the jittered backoff", Outcome{Class: Transient}, 1, none,
			Decision{Action: Requeue, At: now.Add(2500 * time.Millisecond)}},
		{"transient backoff grows with the attempt number", Outcome{Class: Transient}, 3, none,
			Decision{Action: Requeue, At: now.Add(10 * time.Second)}},
		{"transient one attempt before the maximum still requeues", Outcome{Class: Transient}, last - 1, none,
			Decision{Action: Requeue, At: now.Add(150 * time.Second)}}, // ceiling 5m (capped), half of it
		{"transient at the maximum attempts fails as exhausted", Outcome{Class: Transient}, last, none,
			Decision{Action: MarkFailed, Reason: state.Exhausted}},
		{"transient beyond the maximum attempts fails as exhausted", Outcome{Class: Transient}, last + 5, none,
			Decision{Action: MarkFailed, Reason: state.Exhausted}},
		{"rate limited honours a stated delay longer than the backoff", Outcome{Class: RateLimited, RetryAfter: time.Minute}, 1, none,
			Decision{Action: Requeue, At: now.Add(time.Minute)}},
		{"rate limited uses the backoff when it is longer than the stated delay", Outcome{Class: RateLimited, RetryAfter: time.Second}, 1, none,
			Decision{Action: Requeue, At: now.Add(2500 * time.Millisecond)}},
		{"rate limited ignores a negative stated delay", Outcome{Class: RateLimited, RetryAfter: -time.Hour}, 1, none,
			Decision{Action: Requeue, At: now.Add(2500 * time.Millisecond)}},
		{"rate limited at the maximum attempts fails as exhausted", Outcome{Class: RateLimited, RetryAfter: time.Minute}, last, none,
			Decision{Action: MarkFailed, Reason: state.Exhausted}},
		{"rate limited with a stated delay past the deadline fails as expired", Outcome{Class: RateLimited, RetryAfter: 24 * time.Hour}, 1, now.Add(time.Hour),
			Decision{Action: MarkFailed, Reason: state.Expired}},
		{"ambiguous without a dedupe key marks the row unknown", Outcome{Class: Ambiguous}, 1, none,
			Decision{Action: MarkUnknown}},
		{"ambiguous without a dedupe key is unknown, not exhausted, at the maximum attempts", Outcome{Class: Ambiguous}, last, none,
			Decision{Action: MarkUnknown}},
		{"ambiguous without a dedupe key is unknown, not expired, past the deadline", Outcome{Class: Ambiguous}, 1, now.Add(-time.Hour),
			Decision{Action: MarkUnknown}},
		{"ambiguous with a dedupe key requeues like transient", Outcome{Class: Ambiguous, Idempotent: true}, 1, none,
			Decision{Action: Requeue, At: now.Add(2500 * time.Millisecond)}},
		{"ambiguous with a dedupe key at the maximum attempts fails as exhausted", Outcome{Class: Ambiguous, Idempotent: true}, last, none,
			Decision{Action: MarkFailed, Reason: state.Exhausted}},
		{"an unknown class without a dedupe key is treated as ambiguous", Outcome{Class: "bogus"}, 1, none,
			Decision{Action: MarkUnknown}},
		{"an empty class with a dedupe key is treated as ambiguous and requeued", Outcome{Class: "", Idempotent: true}, 1, none,
			Decision{Action: Requeue, At: now.Add(2500 * time.Millisecond)}},
		{"identity pauses until the stated delay", Outcome{Class: Identity, RetryAfter: 10 * time.Minute}, 1, none,
			Decision{Action: PauseIdentity, At: now.Add(10 * time.Minute)}},
		{"identity without a stated delay pauses from now", Outcome{Class: Identity}, 1, none,
			Decision{Action: PauseIdentity, At: now}},
		{"identity with a negative stated delay pauses from now", Outcome{Class: Identity, RetryAfter: -time.Minute}, 1, none,
			Decision{Action: PauseIdentity, At: now}},
		{"identity at the maximum attempts pauses rather than exhausting the row", Outcome{Class: Identity}, last, none,
			Decision{Action: PauseIdentity, At: now}},
		{"identity exactly at the deadline still pauses", Outcome{Class: Identity}, 1, now,
			Decision{Action: PauseIdentity, At: now}},
		{"identity with a pause ending after the deadline still pauses, since it may be lifted sooner", Outcome{Class: Identity, RetryAfter: time.Hour}, 1, now.Add(time.Minute),
			Decision{Action: PauseIdentity, At: now.Add(time.Hour)}},
		{"identity past the deadline fails as expired", Outcome{Class: Identity}, 1, now.Add(-time.Nanosecond),
			Decision{Action: MarkFailed, Reason: state.Expired}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := table(r).Decide(tt.o, tt.attempts, tt.expires)
			if got != tt.want {
				t.Fatalf("Decide(%+v, %d, %v) = %+v; want %+v", tt.o, tt.attempts, tt.expires, got, tt.want)
			}
		})
	}
}

func TestDecideDeadline(t *testing.T) {
	t.Parallel()
	lands := now.Add(2500 * time.Millisecond) // attempt 1, r = 0.5
	tests := []struct {
		name    string
		o       Outcome
		expires time.Time
		want    Decision
	}{
		{"a retry landing exactly at the deadline is scheduled", Outcome{Class: Transient}, lands,
			Decision{Action: Requeue, At: lands}},
		{"a retry landing one nanosecond after the deadline fails as expired", Outcome{Class: Transient}, lands.Add(-time.Nanosecond),
			Decision{Action: MarkFailed, Reason: state.Expired}},
		{"a rate limited retry landing exactly at the deadline is scheduled", Outcome{Class: RateLimited, RetryAfter: time.Minute}, now.Add(time.Minute),
			Decision{Action: Requeue, At: now.Add(time.Minute)}},
		{"a rate limited retry landing one nanosecond after the deadline fails as expired", Outcome{Class: RateLimited, RetryAfter: time.Minute}, now.Add(time.Minute - time.Nanosecond),
			Decision{Action: MarkFailed, Reason: state.Expired}},
		{"an idempotent ambiguous retry landing one nanosecond after the deadline fails as expired", Outcome{Class: Ambiguous, Idempotent: true}, lands.Add(-time.Nanosecond),
			Decision{Action: MarkFailed, Reason: state.Expired}},
		{"a deadline already past fails a transient row as expired", Outcome{Class: Transient}, now.Add(-time.Hour),
			Decision{Action: MarkFailed, Reason: state.Expired}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := table(0.5).Decide(tt.o, 1, tt.expires)
			if got != tt.want {
				t.Fatalf("Decide(%+v, 1, %v) = %+v; want %+v", tt.o, tt.expires, got, tt.want)
			}
		})
	}
}

func TestDecideUsesTheInjectedRand(t *testing.T) {
	t.Parallel()
	calls := 0
	tab := table(0)
	tab.Rand = func() float64 { calls++; return 0.25 }
	got := tab.Decide(Outcome{Class: Transient}, 2, time.Time{}) // ceiling 10s
	if want := (Decision{Action: Requeue, At: now.Add(2500 * time.Millisecond)}); got != want {
		t.Fatalf("Decide = %+v; want %+v", got, want)
	}
	if calls != 1 {
		t.Errorf("Rand called %d times; want 1", calls)
	}
}

func TestDecisionEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		d      Decision
		want   state.Event
		wantTo state.State
	}{
		{"sent maps to accept and moves sending to sent", Decision{Action: MarkSent}, state.Event{Kind: state.Accept}, state.Sent},
		{"requeue maps to retry and moves sending to queued", Decision{Action: Requeue, At: now}, state.Event{Kind: state.Retry}, state.Queued},
		{"pause identity maps to retry and moves sending to queued", Decision{Action: PauseIdentity, At: now}, state.Event{Kind: state.Retry}, state.Queued},
		{"unknown maps to ambiguous and moves sending to unknown", Decision{Action: MarkUnknown}, state.Event{Kind: state.Ambiguous}, state.Unknown},
		{"failed as permanent maps to fail(permanent)", Decision{Action: MarkFailed, Reason: state.Permanent}, state.Event{Kind: state.Fail, Reason: state.Permanent}, state.Failed},
		{"failed as expired maps to fail(expired)", Decision{Action: MarkFailed, Reason: state.Expired}, state.Event{Kind: state.Fail, Reason: state.Expired}, state.Failed},
		{"failed as exhausted maps to fail(exhausted)", Decision{Action: MarkFailed, Reason: state.Exhausted}, state.Event{Kind: state.Fail, Reason: state.Exhausted}, state.Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := tt.d.Event()
			if ev != tt.want {
				t.Fatalf("Event() = %v; want %v", ev, tt.want)
			}
			res, err := state.Transition(state.Sending, ev)
			if err != nil {
				t.Fatalf("Transition(sending, %v): %v", ev, err)
			}
			if !res.Applied || res.To != tt.wantTo || res.Reason != tt.d.Reason {
				t.Errorf("Transition(sending, %v) = %+v; want applied move to %s reason %q", ev, res, tt.wantTo, tt.d.Reason)
			}
		})
	}
	t.Run("an unknown action maps to an event the state machine refuses", func(t *testing.T) {
		t.Parallel()
		ev := Decision{Action: "bogus"}.Event()
		if _, err := state.Transition(state.Sending, ev); !errors.Is(err, state.ErrRefused) {
			t.Fatalf("Transition(sending, %v) error = %v; want ErrRefused", ev, err)
		}
	})
	t.Run("every decision Decide makes is accepted from sending", func(t *testing.T) {
		t.Parallel()
		classes := []Class{Accepted, RateLimited, Transient, Ambiguous, Permanent, Identity, "bogus"}
		for _, c := range classes {
			for _, idem := range []bool{false, true} {
				for _, attempts := range []int{1, 8, 9} {
					for _, exp := range []time.Time{{}, now, now.Add(-time.Hour)} {
						d := table(0.5).Decide(Outcome{Class: c, Idempotent: idem, RetryAfter: time.Minute}, attempts, exp)
						if _, err := state.Transition(state.Sending, d.Event()); err != nil {
							t.Errorf("class %s idempotent %v attempts %d expires %v: decision %+v refused: %v", c, idem, attempts, exp, d, err)
						}
					}
				}
			}
		}
	})
}

func TestCeiling(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	tests := []struct {
		name    string
		attempt int
		want    time.Duration
	}{
		{"attempt 1 is the base", 1, 5 * time.Second},
		{"attempt 2 is base times factor", 2, 10 * time.Second},
		{"attempt 6 is base times factor to the fifth", 6, 160 * time.Second},
		{"attempt 7 would be 320s and is capped at 5m", 7, 5 * time.Minute},
		{"attempt 1000 saturates at the cap without overflowing", 1000, 5 * time.Minute},
		{"the largest attempt number saturates at the cap", math.MaxInt, 5 * time.Minute},
		{"attempt 0 counts as attempt 1", 0, 5 * time.Second},
		{"a negative attempt counts as attempt 1", -3, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := p.Ceiling(tt.attempt); got != tt.want {
				t.Fatalf("Ceiling(%d) = %v; want %v", tt.attempt, got, tt.want)
			}
		})
	}
	t.Run("a cap at the largest duration saturates there at attempt 1000", func(t *testing.T) {
		t.Parallel()
		big := Policy{Base: time.Second, Factor: 10, Cap: math.MaxInt64, MaxAttempts: 1}
		if got := big.Ceiling(1000); got != math.MaxInt64 {
			t.Fatalf("Ceiling(1000) = %v; want %v", got, time.Duration(math.MaxInt64))
		}
		if got := big.Backoff(1000, math.Nextafter(1, 0)); got < 0 || got > math.MaxInt64 {
			t.Fatalf("Backoff(1000, ~1) = %v; want within [0, max]", got)
		}
	})
	t.Run("a factor of 1 keeps every ceiling at the base", func(t *testing.T) {
		t.Parallel()
		flat := Policy{Base: 3 * time.Second, Factor: 1, Cap: time.Minute, MaxAttempts: 5}
		for _, a := range []int{1, 2, 50, 1000} {
			if got := flat.Ceiling(a); got != 3*time.Second {
				t.Errorf("Ceiling(%d) = %v; want 3s", a, got)
			}
		}
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	tests := []struct {
		name    string
		attempt int
		r       float64
		want    time.Duration
	}{
		{"r of 0 gives no delay", 3, 0, 0},
		{"r of one half gives half the ceiling", 3, 0.5, 10 * time.Second},
		{"r of one quarter at the cap gives a quarter of the cap", 50, 0.25, 75 * time.Second},
		{"a negative r is clamped to no delay", 3, -0.5, 0},
		{"a NaN r is clamped to no delay", 3, math.NaN(), 0},
		{"an r of 1 or more is clamped to the ceiling", 3, 1, 20 * time.Second},
		{"an r far above 1 is clamped to the ceiling", 3, 7, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := p.Backoff(tt.attempt, tt.r); got != tt.want {
				t.Fatalf("Backoff(%d, %v) = %v; want %v", tt.attempt, tt.r, got, tt.want)
			}
		})
	}
}

// genPolicy draws valid policies across a wide range, including caps up to
// the largest duration where float rounding is most likely to bite.
func genPolicy(t *rapid.T) Policy {
	base := time.Duration(rapid.Int64Range(1, int64(24*time.Hour)).Draw(t, "base"))
	capacity := base + time.Duration(rapid.Int64Range(0, math.MaxInt64-int64(base)).Draw(t, "capExtra"))
	return Policy{
		Base:        base,
		Factor:      rapid.Float64Range(1, 100).Draw(t, "factor"),
		Cap:         capacity,
		MaxAttempts: rapid.IntRange(1, 100).Draw(t, "maxAttempts"),
	}
}

func TestBackoffProperties(t *testing.T) {
	t.Parallel()
	justBelowOne := math.Nextafter(1, 0)
	t.Run("backoff stays within zero and the ceiling, which stays within the cap", func(t *testing.T) {
		t.Parallel()
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t)
			if err := p.Validate(); err != nil {
				t.Fatalf("generated an invalid policy %+v: %v", p, err)
			}
			attempt := rapid.IntRange(-5, 100000).Draw(t, "attempt")
			r := rapid.Float64Range(0, justBelowOne).Draw(t, "r")
			c := p.Ceiling(attempt)
			if c < p.Base || c > p.Cap {
				t.Fatalf("Ceiling(%d) = %v; want within [base %v, cap %v]", attempt, c, p.Base, p.Cap)
			}
			if next := p.Ceiling(attempt + 1); next < c {
				t.Fatalf("Ceiling(%d) = %v shrank from Ceiling(%d) = %v", attempt+1, next, attempt, c)
			}
			b := p.Backoff(attempt, r)
			if b < 0 || b > c {
				t.Fatalf("Backoff(%d, %v) = %v; want within [0, %v]", attempt, r, b, c)
			}
		})
	})
	t.Run("r of zero gives zero and r just below one gives almost the ceiling", func(t *testing.T) {
		t.Parallel()
		rapid.Check(t, func(t *rapid.T) {
			p := genPolicy(t)
			attempt := rapid.IntRange(1, 100000).Draw(t, "attempt")
			if b := p.Backoff(attempt, 0); b != 0 {
				t.Fatalf("Backoff(%d, 0) = %v; want 0", attempt, b)
			}
			c := p.Ceiling(attempt)
			b := p.Backoff(attempt, justBelowOne)
			// Float64 carries 53 bits: allow a relative error of 2^-50 plus a nanosecond of truncation.
			if slack := time.Duration(float64(c)/(1<<50)) + time.Nanosecond; b > c || c-b > slack {
				t.Fatalf("Backoff(%d, 1-ε) = %v; want within %v below the ceiling %v", attempt, b, slack, c)
			}
		})
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()
	t.Run("the default policy is valid", func(t *testing.T) {
		t.Parallel()
		if err := DefaultPolicy().Validate(); err != nil {
			t.Fatalf("DefaultPolicy().Validate() = %v", err)
		}
	})
	t.Run("a cap equal to the base and a single attempt are valid", func(t *testing.T) {
		t.Parallel()
		p := Policy{Base: time.Second, Factor: 1, Cap: time.Second, MaxAttempts: 1}
		if err := p.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", p, err)
		}
	})
	tests := []struct {
		name   string
		change func(*Policy)
		want   string
	}{
		{"a zero base is refused", func(p *Policy) { p.Base = 0 }, "base must be greater than 0"},
		{"a negative base is refused", func(p *Policy) { p.Base = -time.Second }, "base must be greater than 0"},
		{"a factor below 1 is refused", func(p *Policy) { p.Factor = 0.5 }, "factor must be a finite number >= 1"},
		{"a NaN factor is refused", func(p *Policy) { p.Factor = math.NaN() }, "factor must be a finite number >= 1"},
		{"an infinite factor is refused", func(p *Policy) { p.Factor = math.Inf(1) }, "factor must be a finite number >= 1"},
		{"a cap below the base is refused", func(p *Policy) { p.Cap = time.Second }, "cap must be >= base"},
		{"zero max attempts is refused", func(p *Policy) { p.MaxAttempts = 0 }, "max_attempts must be >= 1"},
		{"negative max attempts is refused", func(p *Policy) { p.MaxAttempts = -1 }, "max_attempts must be >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultPolicy()
			tt.change(&p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate(%+v) = %v; want an error containing %q", p, err, tt.want)
			}
		})
	}
	t.Run("the zero policy reports every problem at once", func(t *testing.T) {
		t.Parallel()
		err := Policy{}.Validate()
		if err == nil {
			t.Fatal("Policy{}.Validate() = nil; want an error")
		}
		for _, want := range []string{"base", "factor", "max_attempts"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		v      string
		want   time.Duration
		wantOK bool
	}{
		{"delta seconds are read as seconds", "120", 2 * time.Minute, true},
		{"zero seconds means retry now", "0", 0, true},
		{"surrounding spaces are ignored", "  30 ", 30 * time.Second, true},
		{"seconds too large for a duration saturate", "99999999999999999999999", math.MaxInt64, true},
		{"an IMF-fixdate is read relative to now", "Tue, 03 Nov 2026 09:31:30 GMT", 90 * time.Second, true},
		{"an RFC 850 date is read relative to now", "Tuesday, 03-Nov-26 09:35:00 GMT", 5 * time.Minute, true},
		{"an ANSI C asctime date is read relative to now", "Tue Nov  3 10:30:00 2026", time.Hour, true},
		{"a date equal to now means retry now", "Tue, 03 Nov 2026 09:30:00 GMT", 0, true},
		{"a date in the past means retry now", "Tue, 03 Nov 2026 09:00:00 GMT", 0, true},
		{"an empty header is no delay", "", 0, false},
		{"a blank header is no delay", "   ", 0, false},
		{"garbage is no delay", "soon", 0, false},
		{"a negative number is no delay", "-5", 0, false},
		{"a signed positive number is no delay", "+5", 0, false},
		{"a fractional number is no delay", "1.5", 0, false},
		{"a number with a unit is no delay", "5s", 0, false},
		{"a date in an unsupported format is no delay", "2026-11-03T09:31:30Z", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tt.v, now)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestWiden(t *testing.T) {
	t.Parallel()
	p := DefaultPolicy()
	tests := []struct {
		name     string
		interval time.Duration
		want     time.Duration
	}{
		{"an unpaced target starts at the base", 0, 5 * time.Second},
		{"a negative interval starts at the base", -time.Second, 5 * time.Second},
		{"a short interval grows by the factor", 12500 * time.Microsecond, 25 * time.Millisecond},
		{"a recipient interval of 6s grows to 12s", 6 * time.Second, 12 * time.Second},
		{"growth stops at the cap", 4 * time.Minute, 5 * time.Minute},
		{"an interval at the cap stays there", 5 * time.Minute, 5 * time.Minute},
		{"an interval above the cap is never narrowed", time.Hour, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := p.Widen(tt.interval); got != tt.want {
				t.Fatalf("Widen(%v) = %v; want %v", tt.interval, got, tt.want)
			}
		})
	}
}
