package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

// DefaultPolicy is the delivery schedule: 12 attempts, backoff with full
// jitter from 30s doubling to at most 12h, so that an endpoint that is
// down for up to about a day still gets every event (the ceilings add up
// to 17h; a dead event can be retried with msgq endpoints retry).
func DefaultPolicy() retry.Policy {
	return retry.Policy{Base: 30 * time.Second, Factor: 2, Cap: 12 * time.Hour, MaxAttempts: 12}
}

// Margin is the least lease a delivery may start with beyond its timeout:
// a POST starts only while the lease outlasts it, so that no second
// worker can take the event over while it is in flight.
const Margin = 2 * time.Second

// Dispatcher delivers due events, cron style (Run returns when nothing is
// due) or, with Follow, until its context ends. Many dispatchers may run
// at once, in one process or many: each claims with a lease.
type Dispatcher struct {
	Store store.Store
	// Owner names this dispatcher in leases; unique per process.
	Owner string
	// Client makes the POSTs; nil: an http.Client that follows no
	// redirects (a 3xx is a failure).
	Client *http.Client
	// Timeout bounds one POST (default 10s); Lease is how long a claim
	// holds an event (default 3*Timeout, at least Timeout+Margin).
	Timeout time.Duration
	Lease   time.Duration
	// Concurrency is how many POSTs are in flight at once (default 8).
	Concurrency int
	// Policy is the retry schedule and bound (zero: DefaultPolicy).
	Policy retry.Policy
	Follow bool
	// Poll is how often an idle Follow dispatcher looks (default 1s).
	Poll time.Duration
	Log  *slog.Logger
	// Now is this host's clock (default time.Now): it stamps the
	// webhook-timestamp header, which the application checks against its
	// own clock.
	Now func() time.Time
	// Rand draws the jitter in [0,1) (default math/rand/v2).
	Rand func() float64
}

// Summary is what Run did. Field names are a JSON contract.
type Summary struct {
	Claimed   int     `json:"claimed"`
	Delivered int     `json:"delivered"`
	Failed    int     `json:"failed"`
	Dead      int     `json:"dead"`
	GivenBack int     `json:"given_back"`
	Seconds   float64 `json:"seconds"`
}

func (d *Dispatcher) defaults() error {
	if d.Store == nil || d.Owner == "" {
		return errors.New("events: a dispatcher needs a store and an owner")
	}
	if d.Timeout <= 0 {
		d.Timeout = 10 * time.Second
	}
	if d.Lease <= 0 {
		d.Lease = 3 * d.Timeout
	}
	if d.Lease < d.Timeout+Margin {
		return fmt.Errorf("events: lease %s must exceed the timeout %s by at least %s", d.Lease, d.Timeout, Margin)
	}
	if d.Concurrency <= 0 {
		d.Concurrency = 8
	}
	if d.Policy == (retry.Policy{}) {
		d.Policy = DefaultPolicy()
	}
	if err := d.Policy.Validate(); err != nil {
		return err
	}
	if d.Poll <= 0 {
		d.Poll = time.Second
	}
	if d.Client == nil {
		d.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Rand == nil {
		d.Rand = rand.Float64
	}
	return nil
}

// Run delivers until nothing is due (or, with Follow, until ctx ends).
// Deliveries in flight when ctx ends finish (within Timeout) and are
// recorded.
func (d *Dispatcher) Run(ctx context.Context) (Summary, error) {
	start := time.Now()
	var sum Summary
	if err := d.defaults(); err != nil {
		return sum, err
	}
	for ctx.Err() == nil {
		claimedAt := time.Now() // monotonic: the lease is counted from before the claim
		ds, err := d.Store.EventClaim(ctx, &store.EventClaimParams{Owner: d.Owner, LeaseFor: d.Lease, Limit: d.Concurrency})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			sum.Seconds = time.Since(start).Seconds()
			return sum, err
		}
		if len(ds) == 0 {
			if !d.Follow {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(d.Poll):
			}
			continue
		}
		sum.Claimed += len(ds)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range ds {
			wg.Add(1)
			go func(e *store.EventDelivery) {
				defer wg.Done()
				r := d.deliver(ctx, e, claimedAt)
				mu.Lock()
				defer mu.Unlock()
				switch r {
				case delivered:
					sum.Delivered++
				case failed:
					sum.Failed++
				case dead:
					sum.Failed++
					sum.Dead++
				case givenBack:
					sum.GivenBack++
				}
			}(&ds[i])
		}
		wg.Wait()
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

type result int

const (
	delivered result = iota
	failed
	dead
	givenBack
	unrecorded
)

// deliver POSTs one event and records the outcome. The outcome is
// recorded even when ctx has ended: the POST was made.
func (d *Dispatcher) deliver(ctx context.Context, e *store.EventDelivery, claimedAt time.Time) result {
	if time.Since(claimedAt)+d.Timeout+Margin > d.Lease {
		// Too little lease left for a whole POST: another worker could
		// take the event over while it is in flight. It goes out when
		// the lease ends.
		return givenBack
	}
	rctx := context.WithoutCancel(ctx)
	retryAfter, postErr := d.post(rctx, e)
	out := &store.EventOutcome{Seq: e.Seq, EndpointID: e.EndpointID, Owner: d.Owner}
	res := delivered
	if postErr == nil {
		out.Delivered = true
	} else {
		out.Error = postErr.Error()
		res = failed
		if e.Attempts >= d.Policy.MaxAttempts {
			out.Dead, res = true, dead
		}
		wait := d.Policy.Backoff(e.Attempts, d.Rand())
		if retryAfter > wait {
			wait = min(retryAfter, d.Policy.Cap)
		}
		// The store's clock: the time the claim compares with.
		now, err := d.Store.ClockNow(rctx)
		if err != nil {
			now = d.Now()
		}
		out.NextAt = now.Add(wait)
	}
	if err := d.Store.EventRecord(rctx, out); err != nil {
		if errors.Is(err, store.ErrStale) {
			// Another worker took it over (our lease ended): it redelivers.
			return unrecorded
		}
		d.Log.Warn("events: recording a delivery failed; the event will be delivered again", "event", e.ID, "err", err)
		return unrecorded
	}
	if postErr != nil {
		d.Log.Warn("events: delivery failed", "event", e.ID, "endpoint", e.EndpointID, "attempt", e.Attempts, "dead", out.Dead, "err", postErr)
	}
	return res
}

// post makes one attempt: a 2xx answer is a delivery, anything else a
// failure (with the Retry-After of a 429 or 503, when it says one).
func (d *Dispatcher) post(ctx context.Context, e *store.EventDelivery) (time.Duration, error) {
	body, err := Body(&e.Event)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("bad endpoint URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "msgq-events")
	if err := SetHeaders(req.Header, e.Secret, e.ID, d.Now(), body); err != nil {
		return 0, err
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		// The URL (which may carry a token in its query) stays out of
		// the error: only what went wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("POST: %w", err)
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, nil
	}
	var ra time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		ra, _ = retry.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return ra, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(excerpt))
}
