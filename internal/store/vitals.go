package store

import (
	"strconv"
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
// shows them; each is in its JSON even at zero (the table leaves invalid
// out while it is zero: only the SQL intake's admission sets it).
var FailureReasons = []state.Reason{state.Permanent, state.Expired, state.Exhausted, state.Canceled, state.Resolved, state.OptedOut, state.Invalid}

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
	// Challenges are the verification challenges' figures
	// (docs/challenges.md), since the store was created.
	Challenges ChallengeVitals `json:"challenges"`
}

// ChallengeVitals are the figures of verification challenges: how they
// ended, how often a fallback went out or was held back by an uncertain
// step, and how many unknown steps outlived their deadline.
type ChallengeVitals struct {
	Open int `json:"open"`
	// Blocked counts open challenges whose next step is held back by an
	// earlier step that is sending or unknown.
	Blocked int `json:"blocked"`
	// CompletedByStep counts completed challenges by the step (1-based,
	// as a string) that completed them.
	CompletedByStep map[string]int `json:"completed_by_step"`
	Expired         int            `json:"expired"`
	Failed          int            `json:"failed"`
	Superseded      int            `json:"superseded"`
	// FallbacksFired counts later steps released; SupersedingSends
	// challenges sent with --supersedes (a user asked for a new code).
	FallbacksFired   int `json:"fallbacks_fired"`
	SupersedingSends int `json:"superseding_sends"`
	// UnknownPastDeadline counts steps in unknown whose deadline has
	// passed: each a possible prompt nobody has checked, in msgq stuck
	// (marked past deadline) until evidence or a person settles it.
	UnknownPastDeadline int `json:"unknown_past_deadline"`
	// RecentExpired counts the challenges that ended expired whose
	// deadline passed within the stats window (Expired counts them all):
	// the figure health checks, since a total only ever grows.
	RecentExpired int `json:"recent_expired"`
	// RecentFirstDeliveries counts challenges whose first delivered
	// evidence (of any step) arrived within the window, and
	// FirstDeliveryP50/P95 are, over them, the time from the challenge's
	// creation (the customer asked for a code) to that evidence: the wait
	// the customer saw, queueing, fallback delay and provider included
	// (zero when none). Over at most LatencySample challenges.
	RecentFirstDeliveries int           `json:"recent_first_deliveries"`
	FirstDeliveryP50      time.Duration `json:"first_delivery_p50_ns"`
	FirstDeliveryP95      time.Duration `json:"first_delivery_p95_ns"`
}

// Add counts n challenges of outcome (completed by step by; blocked).
func (c *ChallengeVitals) Add(outcome string, by int, blocked bool, n int) {
	switch outcome {
	case "open":
		c.Open += n
		if blocked {
			c.Blocked += n
		}
	case "completed":
		if c.CompletedByStep == nil {
			c.CompletedByStep = map[string]int{}
		}
		c.CompletedByStep[strconv.Itoa(by)] += n
	case "expired":
		c.Expired += n
	case "failed":
		c.Failed += n
	case ChallengeSuperseded:
		c.Superseded += n
	}
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

// The running counts the stores keep in counters, by name, in the
// transaction of each change (their 0024 migrations): every figure of
// Stats that counts a class of rows that only grows (resends, challenges
// by outcome) or that is never emptied (parked statuses) reads one of
// these instead of the rows, so that it costs the same on a queue of any
// age.
const (
	CounterResends = "resends"
	// CounterMaybeSent is the prefix of the rows flagged maybe_sent, by
	// state ("maybe_sent:unknown").
	CounterMaybeSent = "maybe_sent:"
	// CounterChallenges is the prefix of the challenges that ended, by
	// outcome and the step that decided it ("challenges:completed:1").
	CounterChallenges           = "challenges:"
	CounterSupersedingSends     = "superseding_sends"
	CounterFallbacksFired       = "fallbacks_fired"
	CounterDeadEvents           = "dead_events"
	CounterParkedEvidence       = "parked_evidence"
	CounterUnattributedInbound  = "unattributed_inbound"
	CounterSuspectEvidence      = "suspect_evidence"
	CounterProviderIDCollisions = "provider_id_collisions"
	CounterUnreadableWebhooks   = "unreadable_webhooks"
	CounterNotices              = "notices"
	CounterUnknownNotices       = "unknown_notices"
)
