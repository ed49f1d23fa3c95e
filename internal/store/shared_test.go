package store

import (
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// TestPastDeadline: an unknown row is past its deadline from the deadline
// on (nothing is called at or after it); a row without one never is, and
// only an unknown row is marked.
func TestPastDeadline(t *testing.T) {
	t.Parallel()
	dl := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		st   state.State
		dl   *time.Time
		now  time.Time
		want bool
	}{
		{state.Unknown, &dl, dl.Add(-time.Second), false},
		{state.Unknown, &dl, dl, true},
		{state.Unknown, &dl, dl.Add(time.Hour), true},
		{state.Unknown, nil, dl.Add(time.Hour), false},
		{state.Sending, &dl, dl.Add(time.Hour), false},
		{state.Failed, &dl, dl.Add(time.Hour), false},
	} {
		m := &Message{State: c.st, ExpiresAt: c.dl}
		if got := m.PastDeadline(c.now); got != c.want {
			t.Errorf("%s, deadline %v, at %v: PastDeadline %v, want %v", c.st, c.dl, c.now, got, c.want)
		}
	}
}
