package cli

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// jsonKeys returns the top-level keys v marshals to.
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestJSONFieldsArePinned pins the -o json field names scripts rely on
// (docs/json.md). Adding a field is fine: add it here too.
// Renaming or removing one breaks users: don't.
func TestJSONFieldsArePinned(t *testing.T) {
	t.Parallel()
	now := time.Now()
	m := &store.Message{ID: "01J", Key: "k", State: state.Queued, Payload: &store.Payload{Text: "x"},
		CreatedAt: now, UpdatedAt: now, NextAttemptAt: now}
	rowFields := []string{"attempts", "body_hash", "channel", "created_at", "expires_at", "id", "identity",
		"key", "lane", "last_error", "maybe_sent", "next_attempt_at", "payload", "provider_id", "purpose", "ref", "state",
		"tenant", "to", "updated_at"}

	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"a list row", m, rowFields},
		{"send", sendResult{m, true}, sortedWith(rowFields, "replayed")},
		{"show", showResult{m, 0, []store.HistoryEntry{}, []store.Attempt{}, []store.Inbound{}}, sortedWith(rowFields, "history", "attempt_count", "inbound")},
		{"a history entry", store.HistoryEntry{}, []string{"applied", "at", "detail", "event", "from", "message_id", "source", "to"}},
		{"an attempt", store.Attempt{}, []string{"class", "finished_at", "http_status", "latency_ns", "message_id",
			"number", "provider_code", "provider_subcode", "raw_error", "started_at"}},
		{"a send --file line", lineResult{}, []string{"line", "replayed", "result"}},
		{"a full send --file line", lineResult{Line: 1, Result: "conflict", Key: "k", ID: "i", State: "queued",
			To: "+1", ExistingID: "e", Error: "x"}, []string{"error", "existing_id", "id", "key", "line", "replayed",
			"result", "state", "to"}},
	} {
		if got := jsonKeys(t, tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JSON fields %v, want %v", tc.name, got, tc.want)
		}
	}
}

func sortedWith(base []string, more ...string) []string {
	out := append(slices.Clone(base), more...)
	slices.Sort(out)
	return out
}
