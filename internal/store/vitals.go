package store

import (
	"time"

	"github.com/msgq/msgq/internal/state"
)

// The vital signs that warn before an incident: a key reused with another
// body, calls that hang, failures by reason, resends and possible
// duplicates, and sends the provider accepted that never progress. Kept apart from Stats' older figures so that each
// set reads on its own.

// CounterKeyConflicts names the running count of key conflicts: sends
// refused by the unique index because their key holds another body.
const CounterKeyConflicts = "key_conflicts"

// LongSending is how long a row may sit in sending before VitalStats
// counts it: a provider call lasts seconds, so a claim older than a
// minute is a drain that stalled or died mid-call, and each such row may
// become a duplicate if someone resends it.
const LongSending = time.Minute

// DefaultNoProgressAfter is how long a sent row may wait for its first
// delivered or read status before it counts as without progress.
const DefaultNoProgressAfter = 15 * time.Minute

// CountBuckets is how long the per-minute counts behind the recent key
// conflicts and replays are kept: a longer stats window sees only these.
const CountBuckets = 8 * 24 * time.Hour

// FailureReasons are the reasons of the failed state, in the order stats
// shows them; each is shown even at zero.
var FailureReasons = []state.Reason{state.Permanent, state.Expired, state.Exhausted, state.Canceled, state.Resolved}

// VitalStats are those figures. Field names are a JSON
// contract (flattened into Stats').
type VitalStats struct {
	// KeyConflicts counts sends refused because their key holds another
	// body, since the store was created; RecentKeyConflicts and
	// RecentKeyReplays count conflicts and replays within the window (to
	// the minute, over at most CountBuckets).
	KeyConflicts       int64 `json:"key_conflicts"`
	RecentKeyConflicts int64 `json:"recent_key_conflicts"`
	RecentKeyReplays   int64 `json:"recent_key_replays"`
	// SendingLong counts rows in sending claimed more than LongSending
	// ago, lease expired or not (SendingPastLease counts the expired).
	SendingLong int `json:"sending_long"`
	// RecentFailures counts rows that became failed within the window, by
	// reason (every reason of FailureReasons, zeros included).
	RecentFailures map[string]int `json:"recent_failures_by_reason"`
	// Resends counts rows made by msgq resend (since the store was
	// created); RecentResends those made within the window.
	Resends       int `json:"resends"`
	RecentResends int `json:"recent_resends"`
	// MaybeSent counts rows flagged maybe_sent (an earlier call's answer
	// was lost), by state (states with rows only).
	MaybeSent map[string]int `json:"maybe_sent_by_state"`
	// SentProgress is, per identity asked about (StatsParams.
	// ProgressIdentities), the rows that became sent within the window
	// and at least NoProgressAfter ago, and how many of them are still
	// sent: no delivered, read or failed status came for them.
	SentProgress    []SentProgress `json:"sent_progress"`
	NoProgressAfter time.Duration  `json:"no_progress_after_ns"`
}

// SentProgress is one identity's accepted sends and those without
// downstream progress.
type SentProgress struct {
	Identity        string `json:"identity"`
	Sent            int    `json:"sent"`
	WithoutProgress int    `json:"without_progress"`
}

// MinuteBucket is the start of t's minute in Unix seconds: the key of the
// per-minute counts.
func MinuteBucket(t time.Time) int64 { return t.Unix() / 60 * 60 }
