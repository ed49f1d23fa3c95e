package retry_test

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/retry"
)

func ExampleTable_Decide() {
	now := time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)
	t := retry.Table{
		Policy: retry.DefaultPolicy(),
		Now:    func() time.Time { return now },
		Rand:   func() float64 { return 0.5 },
	}
	expires := now.Add(time.Hour)

	// A 429 whose Retry-After (60s) is longer than the jittered backoff (2.5s).
	wait, _ := retry.ParseRetryAfter("60", now)
	d := t.Decide(retry.Outcome{Class: retry.RateLimited, RetryAfter: wait}, 1, expires)
	fmt.Println(d.Action, d.At.Sub(now), d.Event())

	// A timeout after the request was written, to a provider without a dedupe key.
	d = t.Decide(retry.Outcome{Class: retry.Ambiguous}, 1, expires)
	fmt.Println(d.Action, d.Event())

	// The eighth transient failure exhausts the default policy.
	d = t.Decide(retry.Outcome{Class: retry.Transient}, 8, expires)
	fmt.Println(d.Action, d.Event())
	// Output:
	// requeue 1m0s retry
	// unknown ambiguous
	// failed fail(exhausted)
}
