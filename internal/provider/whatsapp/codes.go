package whatsapp

import (
	"time"

	"github.com/msgq/msgq/internal/retry"
)

// Delays msgq attaches to rate-limit codes that carry no Retry-After. They
// are floors: the retry table waits max(delay, its own backoff).
const (
	// PairRateLimitDelay (131056): Meta allows one message per 6 s to the
	// same user; its suggested 4^n s schedule is the retry table's backoff.
	PairRateLimitDelay = 6 * time.Second
	// SpamRateLimitDelay (131048): docs/providers.md says "hours" without a
	// number; 4 h is our choice.
	SpamRateLimitDelay = 4 * time.Hour
	// EcosystemDelay (131049): Meta says wait at least 24 h.
	EcosystemDelay = 24 * time.Hour
)

// codeClasses is the table of docs/providers.md, code by code. Codes 200-299
// (permissions) are a range, handled in CodeClass.
var codeClasses = map[int64]retry.Class{
	// Cannot authenticate / token expired.
	0: retry.Identity, 190: retry.Identity,
	// Permission missing (200-299 in CodeClass).
	3: retry.Identity, 10: retry.Identity, 131005: retry.Identity,
	// Phone number not registered.
	133010: retry.Identity,
	// Policy restriction, account locked, country restricted.
	368: retry.Identity, 131031: retry.Identity, 130497: retry.Identity,
	// Payment method.
	131042: retry.Identity,

	// App / account / throughput rate limit.
	4: retry.RateLimited, 80007: retry.RateLimited, 130429: retry.RateLimited,
	// Pair rate limit (that recipient only: the drain widens per-recipient
	// spacing when it sees this code).
	131056: retry.RateLimited,
	// Spam rate limit; ecosystem engagement.
	131048: retry.RateLimited, 131049: retry.RateLimited,

	// Outside the 24 h window: free-form text not allowed. The drain may
	// switch to the row's fallback template on this code.
	131047: retry.Permanent,
	// Undeliverable; user stopped marketing; business blocked the user.
	131026: retry.Permanent, 131050: retry.Permanent, 130403: retry.Permanent,
	// Bad request / media / parameters.
	131051: retry.Permanent, 131053: retry.Permanent, 100: retry.Permanent,
	131008: retry.Permanent, 131009: retry.Permanent,
	// Template problems.
	132000: retry.Permanent, 132001: retry.Permanent, 132005: retry.Permanent,
	132007: retry.Permanent, 132012: retry.Permanent, 132015: retry.Permanent,
	132016: retry.Permanent,

	// Unknown / service unavailable / downtime / maintenance: Meta's own
	// "try again".
	131000: retry.Transient, 131016: retry.Transient, 2: retry.Transient,
	133004: retry.Transient, 131057: retry.Transient,

	// Invalid request or possible server error: we cannot tell which.
	1: retry.Ambiguous,
}

var codeDelays = map[int64]time.Duration{
	131056: PairRateLimitDelay,
	131048: SpamRateLimitDelay,
	131049: EcosystemDelay,
}

// CodeClass maps one Meta error code to its retry class per docs/providers.md,
// with the minimum delay msgq attaches to it (0 for none). known is false
// for a code the table does not list; the class is then "" and the caller
// decides (Send uses the HTTP status as a tie-breaker, see classifyError).
//
// The same table applies to the errors[].code of a failed status webhook.
func CodeClass(code int64) (class retry.Class, delay time.Duration, known bool) {
	if c, ok := codeClasses[code]; ok {
		return c, codeDelays[code], true
	}
	if code >= 200 && code <= 299 {
		return retry.Identity, 0, true
	}
	return "", 0, false
}
