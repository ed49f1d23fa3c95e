package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// Challenges keeps verification challenges (docs/challenges.md): one
// logical send with ordered steps, each a message row of its own, and one
// deadline. internal/challenge decides them; the store writes the
// decision.
type Challenges interface {
	// ChallengeEnqueue writes a challenge and all its steps' rows in one
	// transaction (only step 1 released), and, with p.Supersedes, cancels
	// the superseded challenge's steps that have not gone out in the same
	// transaction. The same key with the same steps is a replay (the
	// existing challenge, Replayed); with other steps, or a key a single
	// send holds, *ConflictError. Errors: *InvalidError for bad params,
	// including a Supersedes key no challenge of the tenant has.
	ChallengeEnqueue(ctx context.Context, p *ChallengeParams) (*ChallengeResult, error)

	// ChallengeGet returns the challenge of tenant whose key is key, or
	// the one whose step is the message with id or key ref. Errors:
	// ErrNotFound.
	ChallengeGet(ctx context.Context, tenant, ref string) (*Challenge, error)

	// ChallengeTick decides the open challenges whose next decision time
	// has come or one of whose steps changed state since their last
	// decision, each in one transaction of its own (the challenge row
	// locked: two ticks never both release a step), and returns how many
	// it decided. Every drain runs it before it claims, and reconcile.
	ChallengeTick(ctx context.Context, p *TickParams) (int, error)
}

// ChallengeStepParams is one step: a send as MessageEnqueue takes it
// (its Key, NotBefore, ExpiresAt and their delays are the challenge's and
// ignored here) and, for every step after the first, After: how long
// after the challenge's enqueue it may be released.
type ChallengeStepParams struct {
	EnqueueParams
	After time.Duration
}

// ChallengeParams is a challenge to create.
type ChallengeParams struct {
	Tenant string
	Key    string
	Steps  []ChallengeStepParams
	// ExpiresIn is the deadline as a delay from the enqueue, on the
	// store's clock (zero: ExpiresAt; both zero: none). No step is called
	// at or after it: it is every step's expires_at.
	ExpiresIn time.Duration
	ExpiresAt time.Time
	// AcceptDuplicateRisk and FallbackUndelivered are internal/challenge's
	// Options.
	AcceptDuplicateRisk bool
	FallbackUndelivered bool
	// Supersedes is the key of an earlier challenge of the tenant (a new
	// code the user asked for) whose steps that have not gone out are
	// canceled.
	Supersedes string
}

// BodyHash is the challenge's identity for replays: every step, its
// delay, the deadline as given, the options and what it supersedes.
func (p *ChallengeParams) BodyHash() string {
	type step struct {
		Body  string `json:"body"`
		After int64  `json:"after_us"`
	}
	steps := make([]step, len(p.Steps))
	for i := range p.Steps {
		steps[i] = step{p.Steps[i].EnqueueParams.BodyHash(), p.Steps[i].After.Microseconds()}
	}
	var at int64
	if !p.ExpiresAt.IsZero() {
		at = p.ExpiresAt.UnixMicro()
	}
	// Field order is the encoding: never reorder (stored hashes depend on it).
	b, _ := json.Marshal(struct {
		Steps      []step `json:"steps"`
		ExpiresIn  int64  `json:"expires_in_us"`
		ExpiresAt  int64  `json:"expires_at_us"`
		Dup        bool   `json:"accept_duplicate_risk"`
		Undeliv    bool   `json:"fallback_undelivered"`
		Supersedes string `json:"supersedes"`
	}{steps, p.ExpiresIn.Microseconds(), at, p.AcceptDuplicateRisk, p.FallbackUndelivered, p.Supersedes})
	sum := sha256.Sum256(b)
	return "c:" + hex.EncodeToString(sum[:])
}

// StepKey is the key of a challenge's step n (1-based): the challenge's
// key for step 1, so that `show KEY` finds it, and KEY/n after it. "/"
// is outside the key grammar, so no caller's key can collide with a
// later step's, and KEY alone is held to the 64-character limit.
func StepKey(key string, n int) string {
	if n == 1 {
		return key
	}
	return key + "/" + strconv.Itoa(n)
}

// HeldUntil is the next_attempt_at of a step not yet released: later
// than any due time, so that claims, which take only due rows, pass it
// over without a condition of their own. The release sets the step's
// release time.
var HeldUntil = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// ChallengeResult is what ChallengeEnqueue produced or found.
type ChallengeResult struct {
	Challenge *Challenge
	Replayed  bool
	// Superseded counts the superseded challenge's steps it canceled.
	Superseded int
}

// Challenge outcomes beyond internal/challenge's (open, completed,
// expired, failed): a challenge a newer one superseded.
const ChallengeSuperseded = "superseded"

// Challenge is a stored challenge with its steps. Field names in JSON
// are a contract (docs/json.md): add, never rename.
type Challenge struct {
	ID                  string     `json:"id"`
	Tenant              string     `json:"tenant"`
	Key                 string     `json:"key"`
	BodyHash            string     `json:"body_hash"`
	Deadline            *time.Time `json:"deadline"`
	AcceptDuplicateRisk bool       `json:"accept_duplicate_risk"`
	FallbackUndelivered bool       `json:"fallback_undelivered"`
	Supersedes          string     `json:"supersedes,omitempty"`
	// Outcome is open, completed, expired, failed or superseded; By the
	// step (1-based) that completed it (0: none); Blocked the step whose
	// uncertain state holds the next one back (0: none); Why the last
	// decision's reason.
	Outcome   string          `json:"outcome"`
	By        int             `json:"completed_by_step,omitempty"`
	Blocked   int             `json:"blocked_by_step,omitempty"`
	Why       string          `json:"why"`
	NextAt    *time.Time      `json:"next_decision_at"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	Steps     []ChallengeStep `json:"steps"`
}

// ChallengeStep is one step: its row and whether and why it was released.
type ChallengeStep struct {
	Step      int       `json:"step"`
	ReleaseAt time.Time `json:"release_at"`
	Released  bool      `json:"released"`
	// Why says why the step did or did not go out (the decision that
	// released, held or canceled it; "" before any).
	Why     string  `json:"why"`
	Message Message `json:"message"`
}

// TickParams says when a challenge tick decides and who runs it.
type TickParams struct {
	Source string    // drain or reconcile: the history source of its cancels
	Now    time.Time // zero: the store's clock
	Limit  int       // at most this many challenges (0: 100)
}
