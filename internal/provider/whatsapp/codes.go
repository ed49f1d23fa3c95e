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

// codeGroups is the table of docs/providers.md, code by code, with what the
// codes mean (msgq identities and Kind.Codes show it). Codes 200-299
// (permissions) are a range, handled in CodeClass.
var codeGroups = []struct {
	codes   []int64
	class   retry.Class
	meaning string
}{
	{[]int64{0, 190}, retry.Identity, "cannot authenticate / token expired"},
	{[]int64{3, 10, 131005}, retry.Identity, "permission missing (and 200-299)"},
	{[]int64{133010}, retry.Identity, "phone number not registered"},
	{[]int64{368, 131031, 130497}, retry.Identity, "policy restriction, account locked, country restricted"},
	{[]int64{131042}, retry.Identity, "payment method"},

	{[]int64{4, 80007, 130429}, retry.RateLimited, "app / account / throughput rate limit"},
	// That recipient only: the drain widens per-recipient spacing when it
	// sees this code.
	{[]int64{131056}, retry.RateLimited, "pair rate limit (that recipient only)"},
	{[]int64{131048, 131049}, retry.RateLimited, "spam rate limit; ecosystem engagement"},

	// The drain may switch to the row's fallback template on this code.
	{[]int64{131047}, retry.Permanent, "outside the 24 h window: free-form text not allowed"},
	{[]int64{131026, 131050, 130403}, retry.Permanent, "undeliverable; user stopped marketing; business blocked the user"},
	{[]int64{131051, 131053, 100, 131008, 131009}, retry.Permanent, "bad request / media / parameters"},
	{[]int64{132000, 132001, 132005, 132007, 132012, 132015, 132016}, retry.Permanent, "template problems"},

	// Meta's own "try again".
	{[]int64{131000, 131016, 2, 133004, 131057}, retry.Transient, "unknown / service unavailable / downtime / maintenance"},

	// We cannot tell which.
	{[]int64{1}, retry.Ambiguous, "invalid request or possible server error"},
}

// codeClasses is codeGroups by code.
var codeClasses = func() map[int64]retry.Class {
	out := map[int64]retry.Class{}
	for _, g := range codeGroups {
		for _, c := range g.codes {
			out[c] = g.class
		}
	}
	return out
}()

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
