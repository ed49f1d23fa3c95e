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
		{"send", sendResult{m, true, false, nil}, sortedWith(rowFields, "replayed", "revived")},
		{"an SMS send", sendResult{m, true, false, &smsInfo{2, "GSM-7"}}, sortedWith(rowFields, "replayed", "revived", "sms")},
		{"an SMS's cost", smsInfo{}, []string{"encoding", "segments"}},
		{"show", showResult{m, 0, []store.HistoryEntry{}, []store.Attempt{}, []store.Inbound{}, nil, nil}, sortedWith(rowFields, "history", "attempt_count", "inbound")},
		{"an SMS show", showResult{m, 0, []store.HistoryEntry{}, []store.Attempt{}, []store.Inbound{}, &smsInfo{}, nil}, sortedWith(rowFields, "history", "attempt_count", "inbound", "sms")},
		{"a challenge step's show", showResult{m, 0, []store.HistoryEntry{}, []store.Attempt{}, []store.Inbound{}, nil, &store.Challenge{}},
			sortedWith(rowFields, "history", "attempt_count", "inbound", "challenge")},
		{"a challenge", store.Challenge{By: 1, Blocked: 1, Supersedes: "s"}, []string{"accept_duplicate_risk", "blocked_by_step", "body_hash",
			"completed_by_step", "created_at", "deadline", "fallback_undelivered", "id", "key", "next_decision_at", "outcome", "steps",
			"supersedes", "tenant", "updated_at", "why"}},
		{"a challenge step", store.ChallengeStep{}, []string{"message", "release_at", "released", "step", "why"}},
		{"an api key", store.APIKey{}, []string{"created_at", "id", "last_used_at", "name", "revoked_at", "tenant"}},
		{"a created api key", apiKeyCreated{&store.APIKey{}, "msgq_x"}, []string{"created_at", "id", "key", "last_used_at", "name", "revoked_at", "tenant"}},
		{"send of a challenge", challengeResult{&store.Challenge{}, false, 0}, []string{"accept_duplicate_risk", "body_hash",
			"created_at", "deadline", "fallback_undelivered", "id", "key", "next_decision_at", "outcome", "replayed", "steps",
			"superseded_steps", "tenant", "updated_at", "why"}},
		{"a history entry", store.HistoryEntry{}, []string{"applied", "at", "detail", "event", "from", "message_id", "source", "to"}},
		{"an attempt", store.Attempt{}, []string{"class", "finished_at", "http_status", "latency_ns", "message_id",
			"number", "provider_code", "provider_subcode", "raw_error", "started_at"}},
		{"a send --file line", lineResult{}, []string{"line", "replayed", "result"}},
		{"a full send --file line", lineResult{Line: 1, Result: "conflict", Key: "k", ID: "i", State: "queued",
			To: "+1", ExistingID: "e", Error: "x", SMS: &smsInfo{}}, []string{"error", "existing_id", "id", "key", "line", "replayed",
			"result", "sms", "state", "to"}},
		{"an endpoint (list)", store.EndpointStatus{}, []string{"consecutive_failures", "created_at", "dead", "delivered", "disabled_at",
			"id", "last_error", "last_failure_at", "last_success_at", "oldest_pending_at", "pending", "tenant", "url"}},
		{"endpoints add", endpointAdded{}, []string{"id", "secret", "tenant", "url"}},
		{"stats' events", eventStats{}, []string{"dead", "oldest_pending_age_ns", "oldest_pending_at", "pending"}},
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
