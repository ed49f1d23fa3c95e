package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/reconcile"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestOperatorJSONFieldsArePinned pins the -o json fields of stuck,
// resolve, cancel, resend and reconcile (docs/json.md), as
// TestJSONFieldsArePinned does for the other commands. Add, never rename.
func TestOperatorJSONFieldsArePinned(t *testing.T) {
	t.Parallel()
	now := time.Now()
	m := &store.Message{ID: "01J", Key: "k", State: state.Unknown, Payload: &store.Payload{Text: "x"},
		CreatedAt: now, UpdatedAt: now, NextAttemptAt: now}
	rowFields := []string{"attempts", "body_hash", "channel", "created_at", "expires_at", "id", "identity",
		"key", "lane", "last_error", "maybe_sent", "next_attempt_at", "payload", "provider_id", "purpose", "ref", "state",
		"tenant", "to", "updated_at"}
	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"a stuck row", stuckRow{m, "131000", time.Minute, false, "", true}, sortedWith(rowFields, "last_code", "age_ns", "lease_expired", "reconcile_note", "past_deadline")},
		{"resolve and cancel", operatorResult{m, state.Sending}, sortedWith(rowFields, "from")},
		{"resend", sendResult{m, false, false, nil}, sortedWith(rowFields, "replayed", "revived")},
		{"reconcile", reconcile.Result{}, []string{"changed", "dry_run", "unresolved"}},
		{"a reconcile change", reconcile.Change{}, []string{"event", "from", "id", "identity", "key", "to", "why"}},
		{"a failing reconcile change", reconcile.Change{Reason: state.Permanent},
			[]string{"event", "from", "id", "identity", "key", "reason", "to", "why"}},
		{"a row left for a person", reconcile.Left{}, []string{"age_ns", "attempts", "id", "identity", "key", "last_code", "note"}},
	} {
		if got := jsonKeys(t, tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JSON fields %v, want %v", tc.name, got, tc.want)
		}
	}
}
