package rules

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func send(key, text string) store.EnqueueParams {
	return store.EnqueueParams{Key: key, To: "+15551234567", Channel: store.ChannelSMS, Identity: "sms-us",
		Payload: store.Payload{Text: text}, NotBeforeIn: time.Minute}
}

func ids() func(time.Time) string {
	n := 0
	return func(time.Time) string { n++; return fmt.Sprintf("new%d", n) }
}

func TestEnqueueMakesTheValidItemsRows(t *testing.T) {
	ps := []store.EnqueueParams{send("k1", "hi"), send("", "hi"), send("k2", "hi")}
	results, rows := Enqueue(ps, now, ids())
	var invalid *store.InvalidError
	if !errors.As(results[1].Err, &invalid) || invalid.Field != "key" || results[0].Err != nil || results[2].Err != nil {
		t.Fatalf("results %+v", results)
	}
	if len(rows) != 2 || rows[0].Idx != 0 || rows[1].Idx != 2 || rows[0].Msg.ID != "new1" || rows[1].Msg.ID != "new2" {
		t.Fatalf("rows %+v", rows)
	}
	m := rows[0].Msg
	if m.Tenant != store.DefaultTenant || m.Lane != store.LaneBulk || m.State != state.Queued || !m.NextAttemptAt.Equal(now.Add(time.Minute)) {
		t.Errorf("row %+v: want the defaults, queued, due on the store's clock plus --not-before", m)
	}
	if ps[0].Tenant != "" || ps[0].NotBeforeIn != time.Minute {
		t.Error("Enqueue changed the caller's params")
	}

	// The index took k2 only: k1 exists.
	fresh, others := Inserted(results, rows, map[string]bool{"new2": true})
	if len(fresh) != 1 || fresh[0].ID != "new2" || results[2].Message != fresh[0] || results[2].Replayed {
		t.Errorf("fresh %+v, result %+v", fresh, results[2])
	}
	if len(others) != 1 || others[0].Idx != 0 || results[0].Message != nil {
		t.Errorf("others %+v, result %+v: want k1 left to Settle", others, results[0])
	}
}

// TestSettleReplaysConflictsOrRevives: the key's row exists; what the
// item gets, and what the store writes (only a revival writes).
func TestSettleReplaysConflictsOrRevives(t *testing.T) {
	_, rows := Enqueue([]store.EnqueueParams{send("k", "hi"), send("k", "bye")}, now, ids())
	same, other := rows[0], rows[1]
	stored := func(edit func(m *store.Message)) *store.Message {
		_, r := Enqueue([]store.EnqueueParams{send("k", "hi")}, now.Add(-time.Hour), func(time.Time) string { return "old" })
		m := r[0].Msg
		if edit != nil {
			edit(m)
		}
		return m
	}
	optedOut := func(m *store.Message) { m.State, m.Reason, m.LastError = state.Failed, state.OptedOut, "opted out" }
	for _, c := range []struct {
		name     string
		item     Pending
		row      *store.Message
		facts    map[string]Facts
		want     string // replay, conflict or revival
		wantFrom state.State
	}{
		{"same body: a replay", same, stored(nil), nil, "replay", state.Queued},
		{"same body of a sent row: a replay", same, stored(func(m *store.Message) { m.State = state.Sent }), nil, "replay", state.Sent},
		{"other body: a conflict", other, stored(nil), nil, "conflict", ""},
		{"other body of a refused row: a conflict", other, stored(optedOut), map[string]Facts{"old": {}}, "conflict", ""},
		{"a policy refusal that called nobody, lifted: revived", same, stored(optedOut), map[string]Facts{"old": {}}, "revival", state.Queued},
		{"a policy refusal still holding: a replay", same, stored(optedOut), map[string]Facts{"old": {Holds: true}}, "replay", state.Failed},
		{"a called row is never revived", same, stored(optedOut), map[string]Facts{"old": {Called: true}}, "replay", state.Failed},
		{"a counted attempt is never revived", same, stored(func(m *store.Message) { optedOut(m); m.Attempts = 1 }),
			map[string]Facts{"old": {}}, "replay", state.Failed},
		{"a lost answer is never revived", same, stored(func(m *store.Message) { optedOut(m); m.MaybeSent = true }),
			map[string]Facts{"old": {}}, "replay", state.Failed},
		{"a permanent failure is never revived", same, stored(func(m *store.Message) { optedOut(m); m.Reason = state.Permanent }),
			map[string]Facts{"old": {}}, "replay", state.Failed},
	} {
		results := make([]store.EnqueueResult, 2)
		got, err := Settle(results, []Pending{c.item}, map[string]*store.Message{Key(c.row.Tenant, c.row.Key): c.row}, c.facts, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := results[c.item.Idx]
		switch c.want {
		case "replay":
			if !r.Replayed || r.Revived || r.Err != nil || r.Message != c.row || r.Message.State != c.wantFrom ||
				got.Replays != 1 || got.Conflicts != 0 || len(got.Revivals) != 0 {
				t.Errorf("%s: %+v, settled %+v", c.name, r, got)
			}
		case "conflict":
			var ce *store.ConflictError
			if !errors.As(r.Err, &ce) || ce.ExistingID != "old" || ce.Key != "k" || ce.Tenant != store.DefaultTenant || r.Message != nil ||
				got.Conflicts != 1 || got.Replays != 0 || len(got.Revivals) != 0 {
				t.Errorf("%s: %+v (%v), settled %+v", c.name, r, r.Err, got)
			}
		case "revival":
			if !r.Revived || r.Replayed || r.Err != nil || r.Message.ID != "old" || r.Message.State != c.wantFrom ||
				len(got.Revivals) != 1 || got.Revivals[0].ID != "old" || got.Replays != 0 {
				t.Errorf("%s: %+v, settled %+v", c.name, r, got)
			}
		}
	}

	// A key the index refused but nobody found is a fault, not an answer.
	if _, err := Settle(make([]store.EnqueueResult, 1), []Pending{same}, map[string]*store.Message{}, nil, now); err == nil {
		t.Error("Settle answered for a key that was not found")
	}
}

func TestOneIsTheItemsOwnAnswer(t *testing.T) {
	fault := errors.New("disk full")
	if _, err := One(nil, fault); err != fault {
		t.Errorf("batch error %v", err)
	}
	ce := &store.ConflictError{Key: "k", ExistingID: "old"}
	if r, err := One([]store.EnqueueResult{{Err: ce}}, nil); r != nil || err != ce {
		t.Errorf("item error: %+v, %v", r, err)
	}
	m := &store.Message{ID: "m1"}
	if r, err := One([]store.EnqueueResult{{Message: m, Replayed: true}}, nil); err != nil || r.Message != m || !r.Replayed {
		t.Errorf("answer: %+v, %v", r, err)
	}
}
