package rules

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

var now = time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)

// refused is a row the drain failed as opted_out before any call.
func refused() *store.Message {
	return &store.Message{ID: "m1", Tenant: "default", Key: "k", BodyHash: "h", Identity: "sms-us", To: "+15551234567",
		State: state.Failed, Reason: state.OptedOut, Payload: &store.Payload{Text: "hi"}, LastError: "opted out",
		NextAttemptAt: now.Add(-time.Hour)}
}

func pending(idx int, key, hash string) Pending {
	exp := now.Add(time.Hour)
	return Pending{Idx: idx, Msg: &store.Message{ID: "new", Tenant: "default", Key: key, BodyHash: hash,
		NextAttemptAt: now.Add(time.Minute), ExpiresAt: &exp}}
}

func settle(t *testing.T, others []Pending, m *store.Message, facts map[string]Facts) ([]store.EnqueueResult, Settled) {
	t.Helper()
	results := make([]store.EnqueueResult, len(others))
	got, err := Settle(results, others, map[string]*store.Message{Key(m.Tenant, m.Key): m}, facts, now)
	if err != nil {
		t.Fatal(err)
	}
	return results, got
}

func TestARefusedRowRevivesOnceItsConditionLifted(t *testing.T) {
	m := refused()
	others := []Pending{pending(0, "k", "h"), pending(1, "k", "h")}
	if c := Candidates(others, map[string]*store.Message{Key("default", "k"): m}); len(c) != 1 || c[0] != m {
		t.Fatalf("Candidates = %v, want the refused row once", c)
	}
	res, got := settle(t, others, m, map[string]Facts{"m1": {}})
	if len(got.Revivals) != 1 || got.Replays != 1 || got.Conflicts != 0 {
		t.Fatalf("settled %+v, want one revival then one replay", got)
	}
	v := got.Revivals[0]
	if v.ID != "m1" || v.Reason != state.OptedOut || !v.At.Equal(now) || !v.NextAt.Equal(now.Add(time.Minute)) ||
		v.ExpiresAt == nil || !v.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("revival %+v", v)
	}
	h := v.History
	if h.From != state.Failed || h.To != state.Queued || h.Reason != state.NoReason || h.Event != "revive(opted_out)" ||
		!h.Applied || h.Source != store.SourceSend || h.Detail == "" {
		t.Errorf("history %+v", h)
	}
	if !res[0].Revived || res[0].Replayed || res[0].Message.State != state.Queued || res[0].Message.Reason != "" ||
		res[0].Message.LastError != "" || res[0].Message.ID != "m1" {
		t.Errorf("first item %+v (row %+v), want revived", res[0], res[0].Message)
	}
	if res[1].Revived || !res[1].Replayed || res[1].Message.State != state.Queued {
		t.Errorf("second item %+v, want a replay of the revived row", res[1])
	}
	if m.State != state.Failed {
		t.Error("Settle changed the row it was given")
	}
}

func TestARefusalStandsWhileItsConditionHolds(t *testing.T) {
	for name, f := range map[string]map[string]Facts{
		"still opted out": {"m1": {Holds: true}},
		"a call recorded": {"m1": {Called: true}},
		"facts not read":  nil,
	} {
		res, got := settle(t, []Pending{pending(0, "k", "h")}, refused(), f)
		if len(got.Revivals) != 0 || got.Replays != 1 || !res[0].Replayed || res[0].Revived || res[0].Message.State != state.Failed {
			t.Errorf("%s: settled %+v, result %+v, want a replay of the failure", name, got, res[0])
		}
	}
	res, got := settle(t, []Pending{pending(0, "k", "other")}, refused(), map[string]Facts{"m1": {}})
	var ce *store.ConflictError
	if got.Conflicts != 1 || len(got.Revivals) != 0 || !errors.As(res[0].Err, &ce) || ce.ExistingID != "m1" {
		t.Errorf("another body: settled %+v, err %v, want a conflict", got, res[0].Err)
	}
}

// TestOnlyAPolicyRefusalThatSentNothingRevives: for any existing row and
// any facts, an item with the same body revives the row exactly when it
// is failed with a policy reason, made no call (no attempt, no lost
// answer, no provider id, no attempt row), still has its content, and the
// condition no longer holds; the revival is the machine's revive. Any
// other body is a conflict, and nothing else is ever written.
func TestOnlyAPolicyRefusalThatSentNothingRevives(t *testing.T) {
	states := []state.State{state.Queued, state.Sending, state.Unknown, state.Sent, state.Failed, state.Delivered, state.Read}
	reasons := []state.Reason{state.NoReason, state.Permanent, state.Expired, state.Exhausted, state.Canceled, state.Resolved, state.OptedOut}
	rapid.Check(t, func(t *rapid.T) {
		m := refused()
		m.State = rapid.SampledFrom(states).Draw(t, "state")
		m.Reason = rapid.SampledFrom(reasons).Draw(t, "reason")
		m.Attempts = rapid.IntRange(0, 2).Draw(t, "attempts")
		m.MaybeSent = rapid.Bool().Draw(t, "maybe_sent")
		if rapid.Bool().Draw(t, "provider_id") {
			m.ProviderID = "SM1"
		}
		if rapid.Bool().Draw(t, "purged") {
			m.Payload = nil
		}
		f := Facts{Holds: rapid.Bool().Draw(t, "holds"), Called: rapid.Bool().Draw(t, "called")}
		same := rapid.Bool().Draw(t, "same body")
		hash := "h"
		if !same {
			hash = "other"
		}
		n := rapid.IntRange(1, 3).Draw(t, "items")
		others := make([]Pending, n)
		for i := range others {
			others[i] = pending(i, "k", hash)
		}
		before := *m
		results := make([]store.EnqueueResult, n)
		got, err := Settle(results, others, map[string]*store.Message{Key("default", "k"): m}, map[string]Facts{"m1": f}, now)
		if err != nil {
			t.Fatal(err)
		}
		want := same && m.State == state.Failed && m.Reason.Policy() && m.Attempts == 0 && !m.MaybeSent &&
			m.ProviderID == "" && m.Payload != nil && !f.Holds && !f.Called
		if !same {
			if got.Conflicts != n || got.Replays != 0 || len(got.Revivals) != 0 {
				t.Fatalf("another body: %+v", got)
			}
			return
		}
		if want != (len(got.Revivals) == 1) || len(got.Revivals) > 1 || got.Replays != n-len(got.Revivals) {
			t.Fatalf("row %+v facts %+v: settled %+v, want revival %v", before, f, got, want)
		}
		if want {
			res, err := state.Transition(before.State, state.Event{Kind: state.Revive, Reason: before.Reason})
			if err != nil || res.To != got.Revivals[0].History.To || !results[0].Revived {
				t.Fatalf("revival %+v disagrees with the machine (%+v, %v)", got.Revivals[0], res, err)
			}
		}
		for i, r := range results {
			if r.Revived != (want && i == 0) || r.Replayed == r.Revived {
				t.Fatalf("item %d: %+v", i, r)
			}
		}
		if *m != before {
			t.Fatal("Settle changed the row it was given")
		}
	})
}
