package rules

import (
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func TestExpireFailsOrAbandons(t *testing.T) {
	x, err := Expire(false)
	if err != nil || x.Result.To != state.Failed || x.Result.Reason != state.Expired || x.Event.Kind != state.Fail || x.Detail == "" {
		t.Fatalf("not maybe sent: %+v, %v", x, err)
	}
	// An earlier call may have reached the phone: a person decides.
	y, err := Expire(true)
	if err != nil || y.Result.To != state.Unknown || y.Event.Kind != state.Abandon || y.Detail == "" || y.Detail == x.Detail {
		t.Fatalf("maybe sent: %+v, %v", y, err)
	}
}

func TestLeaseTakesInOrderWithinPacingAndLimit(t *testing.T) {
	p := &store.ClaimParams{Owner: "d1", LeaseFor: 30 * time.Second, Limit: 2}
	now := t0.Add(1500 * time.Nanosecond)
	l, err := NewLease(p, now)
	if err != nil {
		t.Fatal(err)
	}
	if l.From != state.Queued || l.To != state.Sending || l.Event != string(state.Claim) || l.Source != store.SourceDrain ||
		l.Detail != "lease d1" || !l.Until.Equal(now.Add(30*time.Second).Truncate(store.Resolution)) {
		t.Fatalf("lease %+v", l)
	}
	// Identity "paced" lets one call a minute: its second row waits.
	pace := store.NewPacer(map[string]store.Pacing{"paced": {Spacing: time.Minute}})
	cands := []*store.Message{
		{ID: "a", Identity: "paced", To: "+1", State: state.Queued, Attempts: 1},
		{ID: "b", Identity: "paced", To: "+2", State: state.Queued},
		{ID: "c", Identity: "free", To: "+3", State: state.Queued},
		{ID: "d", Identity: "free", To: "+4", State: state.Queued},
	}
	got := l.Take(cands, pace, p.Limit, 10*time.Second)
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Fatalf("took %+v", got)
	}
	for _, c := range got {
		if c.State != state.Sending || c.LeaseOwner != "d1" || c.LeaseUntil == nil || !c.LeaseUntil.Equal(l.Until) ||
			!c.UpdatedAt.Equal(now) || !c.SlotAt.Equal(now) {
			t.Fatalf("claimed %+v", c)
		}
	}
	if got[0].Attempts != 2 || got[1].Attempts != 1 {
		t.Fatalf("attempts %d, %d", got[0].Attempts, got[1].Attempts)
	}
	if cands[1].State != state.Queued || cands[3].State != state.Queued {
		t.Fatal("a row not taken changed")
	}
}

func TestLeaseWithoutATimeLeavesTheClockToTheStatement(t *testing.T) {
	l, err := NewLease(&store.ClaimParams{Owner: "d1", LeaseFor: time.Second}, time.Time{})
	if err != nil || !l.At.IsZero() || !l.Until.IsZero() || l.To != state.Sending {
		t.Fatalf("%+v, %v", l, err)
	}
}
