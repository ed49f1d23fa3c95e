// Package drain turns queued rows into provider calls without ever making
// one logical send twice (docs/drain.md): a durable claim with a lease
// before each call, the outcome classified by the retry table and written
// through the state machine only while the lease is still ours, and every
// call recorded as an attempt.
package drain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/quiet"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Identity is one sending account: its provider, retry schedule and pacing.
type Identity struct {
	Name     string
	Provider provider.Provider
	Policy   retry.Policy
	Pacing   store.Pacing
	// Headroom is the share of the pacing limits kept unused (see
	// DefaultHeadroom); zero means DefaultHeadroom.
	Headroom float64
	// Quiet is the identity's quiet hours (the zero Policy: none, though
	// a row's own override still applies).
	Quiet quiet.Policy
	// DailyRecipients is its daily unique-recipient limit (0: none),
	// kept by the store in the claim (store.ClaimParams.DailyRecipients).
	DailyRecipients int
}

// Config is one drain run.
type Config struct {
	Store      store.Store
	Identities map[string]*Identity
	// Owner names this drain in leases; unique per process.
	Owner string
	// Lease is how long a claim lasts. It must cover the wait for the
	// row's pacing slot and the call with CallMargin to spare: a call
	// starts only while the lease, measured from before the claim was
	// asked for, has that much left (see LeaseCheck). A row whose lease
	// ran out is never sent again automatically.
	Lease time.Duration
	// CallTimeout bounds one provider call.
	CallTimeout time.Duration
	// Concurrency is how many calls may be in flight at once.
	Concurrency int
	// Lane and Only restrict what is claimed ("" and empty: everything the
	// configured identities send).
	Lane string
	Only []string
	// Follow keeps draining until ctx ends; otherwise Run returns once
	// nothing is eligible (cron).
	Follow bool
	// MaxDuration and MaxMessages stop claiming once reached (0: no limit).
	MaxDuration time.Duration
	MaxMessages int
	// Grace is how long in-flight calls may run after ctx ends before they
	// are cut off (a cut-off call is recorded like any other outcome).
	Grace time.Duration
	// IdlePoll is the longest wait between claims in Follow mode when the
	// queue is empty.
	IdlePoll time.Duration

	// WindowClosed, when set, says the customer-service window of
	// (identity, recipient) is known to be closed: free-form text cannot
	// be delivered (WhatsApp 131047), so such a row is switched to its
	// fallback template or held for HoldFor instead of being sent into a
	// certain failure. nil means no window data (every send goes out).
	WindowClosed func(ctx context.Context, identity, recipient string) bool
	// HoldFor is how long a held row waits before it is tried again;
	// zero means one hour.
	HoldFor time.Duration
	// TemplateHeld, when set, says a provider reported the template (of
	// that language) unusable for the identity, and the hold's language:
	// a row that would send it goes back untouched, held (last_error
	// store.TemplateHeldError) until the template is approved again.
	TemplateHeld func(ctx context.Context, identity, template, lang string) (holdLang string, held bool)
	// OptedOut, when set, says the recipient opted out of the identity
	// (store.OptOuts): the row fails as opted_out before any call, a
	// policy refusal that keeps no claim on its key (a later enqueue of
	// the key may revive it: internal/state's revive). nil means no
	// opt-out data.
	OptedOut func(ctx context.Context, identity, recipient string) (bool, error)

	// Admit, when set, decides the store's intake rows (PostgreSQL's
	// enqueue(), docs/sql-enqueue.md: internal/queue's Admission.Run),
	// queueing the valid ones. The drain runs it when it starts, whenever
	// a claim finds nothing, and at most every AdmitEvery while claims
	// keep finding rows: rows taken in by SQL are queued promptly, at no
	// cost to a claim.
	Admit func(ctx context.Context) (store.IntakeResult, error)

	// Now is the store's clock as this process knows it (its host's
	// clock corrected by the measured offset; time.Now when nil): pacing
	// slots, deadlines and leases come from the store's clock, and the
	// drain's own waits and checks against them must read the same one.
	Now  func() time.Time
	Rand func() float64
	Log  *slog.Logger

	// Mono and Wall are the two clocks a lease is measured with; nil
	// means the host's. Mono counts elapsed time and is never stepped,
	// but (on Linux) stands still while the host is suspended; Wall keeps
	// counting through a suspend and a VM pause, but can be stepped. A
	// lease is trusted only as far as both say it lasts.
	Mono func() time.Duration
	Wall func() time.Time
}

// CallMargin is how long before its lease ends, by the drain's own
// clocks, a call must be over: it covers the moments between the lease
// check and the request leaving, and a call's timeout firing a little
// late on a loaded host. With the takeover side's own margin
// (store.TakeoverMargin, past lease_until) it is the slack between the
// last moment a drain can be calling and the first moment another
// process may take the row over.
const CallMargin = time.Second

// AdmitEvery is how often a busy drain admits intake rows (Config.Admit);
// admitIdleEvery how often one that finds nothing to claim does (each
// wake-up, but not each of the short waits while calls are out).
const (
	AdmitEvery     = time.Second
	admitIdleEvery = 50 * time.Millisecond
)

// processStart anchors the default monotonic clock.
var processStart = time.Now()

// Summary counts what a run did. Field names are a JSON contract.
type Summary struct {
	Claimed int `json:"claimed"`
	Sent    int `json:"sent"`
	Retried int `json:"retried"`
	Failed  int `json:"failed"`
	Unknown int `json:"unknown"`
	Paused  int `json:"paused"`
	// Unrecorded counts outcomes the store would not take before the run
	// had to end: those rows stay in sending, visible, never resent.
	Unrecorded int `json:"unrecorded"`
	// LeaseLost counts outcomes that found the row taken over (their
	// answers are kept on it as evidence, not applied).
	LeaseLost int `json:"lease_lost"`
	// GivenBack counts rows given back without a call because the lease
	// check failed (the process was frozen, or a clock jumped).
	GivenBack int `json:"given_back"`
	// Admitted, Invalid and IntakeExpired count the intake rows this run
	// queued, failed as invalid and failed as expired (Config.Admit).
	Admitted      int     `json:"admitted"`
	Invalid       int     `json:"invalid"`
	IntakeExpired int     `json:"intake_expired"`
	Seconds       float64 `json:"seconds"`
}

func (c *Config) defaults() error {
	if c.Store == nil {
		return errors.New("drain: no store")
	}
	if len(c.Identities) == 0 {
		return errors.New("drain: no identities")
	}
	if c.Owner == "" {
		return errors.New("drain: no owner")
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 5 * time.Minute
	}
	// The slot horizon (1 s), the call and the outcome write must fit.
	if c.Lease < c.CallTimeout+10*time.Second {
		return fmt.Errorf("drain: lease %s must exceed the call timeout %s by at least 10s", c.Lease, c.CallTimeout)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Second
	}
	if c.IdlePoll <= 0 {
		c.IdlePoll = 2 * time.Second
	}
	if c.HoldFor <= 0 {
		c.HoldFor = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Mono == nil {
		c.Mono = func() time.Duration { return time.Since(processStart) }
	}
	if c.Wall == nil {
		c.Wall = func() time.Time { return time.Now().Round(0) } // Round(0): the wall reading alone
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	for name, id := range c.Identities {
		if id.Provider == nil {
			return fmt.Errorf("drain: identity %s has no provider", name)
		}
		if err := id.Policy.Validate(); err != nil {
			return fmt.Errorf("drain: identity %s: %w", name, err)
		}
	}
	return nil
}

type drainer struct {
	cfg    Config
	names  []string
	pacing map[string]store.Pacing
	daily  map[string]int
	// outcomes feeds the recorder, which writes them in batches: one
	// durable commit for many calls.
	outcomes chan *outcome
	// hard ends when the run must end (grace over): outcome writes stop
	// retrying then.
	hard context.Context

	mu  sync.Mutex
	sum Summary
}

// outcome is one call's result on its way to the store; the recorder
// calls finish with what the store made of it.
type outcome struct {
	p      store.TransitionParams
	finish func(store.TransitionResult)
	// decided is when the outcome was decided (monotonic): a retry's
	// delay counts from then, not from when the batch is written.
	decided time.Time
}

// params is o's transition as it is written now: a retry's delay less
// the time the outcome waited for its batch.
func (o *outcome) params() store.TransitionParams {
	p := o.p
	if p.NextAttemptIn > 0 {
		p.NextAttemptIn = max(0, p.NextAttemptIn-time.Since(o.decided))
	}
	return p
}

// maxOutcomeBatch bounds one outcome transaction.
const maxOutcomeBatch = 256

// recorder writes outcomes as they come, batching whatever queued up while
// the previous batch was committing (group commit). It stops when
// outcomes is closed.
func (d *drainer) recorder(wg *sync.WaitGroup) {
	defer wg.Done()
	batch := make([]*outcome, 0, maxOutcomeBatch)
	params := make([]store.TransitionParams, 0, maxOutcomeBatch)
	for first := range d.outcomes {
		batch, params = append(batch[:0], first), append(params[:0], first.params())
	fill:
		for len(batch) < maxOutcomeBatch {
			select {
			case o, ok := <-d.outcomes:
				if !ok {
					break fill
				}
				batch, params = append(batch, o), append(params, o.params())
			default:
				break fill
			}
		}
		res, err := d.writeOutcomes(params)
		for i, o := range batch {
			if err != nil {
				o.finish(store.TransitionResult{Err: err})
			} else {
				o.finish(res[i])
			}
		}
	}
}

// Run drains until nothing is eligible (or, with Follow, until ctx ends),
// then waits for in-flight calls and returns what it did. An error means
// the store failed; outcomes already recorded stay recorded.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if err := cfg.defaults(); err != nil {
		return Summary{}, err
	}
	d := &drainer{cfg: cfg, pacing: map[string]store.Pacing{}, daily: map[string]int{}}
	only := map[string]bool{}
	for _, n := range cfg.Only {
		only[n] = true
	}
	for name, id := range cfg.Identities {
		if len(only) == 0 || only[name] {
			d.names = append(d.names, name)
			h := id.Headroom
			if h <= 0 {
				h = DefaultHeadroom
			}
			d.pacing[name] = WithHeadroom(id.Pacing, h)
			if id.DailyRecipients > 0 {
				d.daily[name] = id.DailyRecipients
			}
		}
	}
	if len(d.names) == 0 {
		return Summary{}, fmt.Errorf("drain: none of the identities %v is configured", cfg.Only)
	}
	start := cfg.Now()

	// Calls run under their own context: when ctx ends the drain stops
	// claiming at once, but lets in-flight calls finish for Grace.
	callCtx, cutOff := context.WithCancel(context.WithoutCancel(ctx))
	defer cutOff()
	d.hard = callCtx
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.NewTimer(cfg.Grace)
		defer t.Stop()
		select {
		case <-t.C:
			cutOff()
		case <-callCtx.Done():
		}
	})
	defer stopGrace()

	// A call's slot is free once its outcome is handed to the recorder,
	// so claims and calls go on while a batch commits. The channel bounds
	// how many outcomes may wait: when it is full, calls wait for it.
	d.outcomes = make(chan *outcome, max(cfg.Concurrency, maxOutcomeBatch))
	var recWG sync.WaitGroup
	recWG.Add(1)
	go d.recorder(&recWG)

	// A follow drain on a store that announces enqueues sleeps until one
	// does (or IdlePoll passes: retries come due without an announcement).
	var wake <-chan struct{}
	if l, ok := cfg.Store.(store.Listener); ok && cfg.Follow {
		w, err := l.Enqueued(ctx)
		if err != nil {
			cfg.Log.Warn("cannot listen for enqueues; polling instead", "err", err, "every", cfg.IdlePoll)
		}
		wake = w
	}

	// admit runs Config.Admit and says whether it queued rows. Its
	// failure is no reason to stop sending what is queued already.
	var lastAdmit time.Duration
	admit := func() bool {
		if cfg.Admit == nil {
			return false
		}
		lastAdmit = cfg.Mono()
		res, err := cfg.Admit(ctx)
		d.add(func(s *Summary) {
			s.Admitted, s.Invalid, s.IntakeExpired = s.Admitted+res.Admitted, s.Invalid+res.Invalid, s.IntakeExpired+res.Expired
		})
		if err != nil && ctx.Err() == nil {
			cfg.Log.Warn("admitting rows taken in by SQL failed", "err", err)
		}
		if res.Invalid > 0 {
			cfg.Log.Warn("rows taken in by SQL failed as invalid (msgq list --state failed shows their errors)", "invalid", res.Invalid)
		}
		return res.Admitted > 0
	}
	admit()

	sem := make(chan struct{}, cfg.Concurrency)
	done := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	var runErr error
	idle := 50 * time.Millisecond
	claimed := 0
	for ctx.Err() == nil {
		if cfg.MaxDuration > 0 && cfg.Now().Sub(start) >= cfg.MaxDuration {
			break
		}
		want := cfg.Concurrency - len(sem)
		if cfg.MaxMessages > 0 {
			want = min(want, cfg.MaxMessages-claimed)
			if want <= 0 && len(sem) == 0 {
				break
			}
		}
		// Claim in batches: each claim is a durable commit, so wait until
		// half the slots are free rather than claim one row at a time.
		if want <= 0 || (len(sem) > 0 && want < (cfg.Concurrency+1)/2 && (cfg.MaxMessages == 0 || claimed+want < cfg.MaxMessages)) {
			waitOne(ctx, done, time.Second)
			continue
		}
		if cfg.Admit != nil && cfg.Mono()-lastAdmit >= AdmitEvery {
			admit()
		}
		// The lease is counted from before the claim is asked for: the
		// store sets it no earlier, so it lasts at least this long.
		asked := LeaseStart{Mono: cfg.Mono(), Wall: cfg.Wall()}
		// Challenges first (docs/challenges.md): a fallback step whose
		// time has come is released, or a step canceled, before the claim
		// that would take it.
		var cs []store.Claimed
		_, err := cfg.Store.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain})
		if err == nil {
			cs, err = cfg.Store.MessageClaim(ctx, &store.ClaimParams{Owner: cfg.Owner, LeaseFor: cfg.Lease, Limit: want,
				Lane: cfg.Lane, Identities: d.names, Pacing: d.pacing, DailyRecipients: d.daily})
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			// A claim that failed claimed nothing. In follow mode the
			// drain outlives a store hiccup; in cron mode the next run
			// will try again.
			if !cfg.Follow {
				runErr = fmt.Errorf("claim: %w", err)
				break
			}
			cfg.Log.Warn("claim failed; retrying", "err", err, "in", idle)
			sleep(ctx, idle)
			idle = min(idle*2, cfg.IdlePoll)
			continue
		}
		if len(cs) == 0 {
			// Nothing claimable: rows may wait in intake, taken in since
			// the last admission (not checked again within
			// admitIdleEvery: the short waits while calls are out).
			if cfg.Mono()-lastAdmit >= admitIdleEvery && admit() {
				continue
			}
			if len(sem) > 0 {
				// Calls in flight may free pacing slots or end the run.
				waitOne(ctx, done, idle)
				continue
			}
			if !cfg.Follow {
				break
			}
			// Woken (or the poll is up): rows may wait in intake as well
			// as in the queue.
			if wake != nil {
				waitOne(ctx, wake, cfg.IdlePoll)
				admit()
				continue
			}
			sleep(ctx, idle)
			idle = min(idle*2, cfg.IdlePoll)
			admit()
			continue
		}
		idle = 50 * time.Millisecond
		claimed += len(cs)
		d.add(func(s *Summary) { s.Claimed += len(cs) })
		for i := range cs {
			sem <- struct{}{}
			wg.Add(1)
			go func(c store.Claimed) {
				defer func() {
					<-sem
					wg.Done()
					select {
					case done <- struct{}{}:
					default:
					}
				}()
				d.send(callCtx, &c, asked)
			}(cs[i])
		}
	}
	wg.Wait()
	close(d.outcomes)
	recWG.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sum.Seconds = cfg.Now().Sub(start).Seconds()
	if runErr == nil && d.sum.Unrecorded > 0 {
		runErr = fmt.Errorf("%d outcomes could not be recorded: those rows stay in sending under their lease", d.sum.Unrecorded)
	}
	return d.sum, runErr
}

// DefaultHeadroom is the share of a configured limit msgq keeps unused.
// Calls start at their slots, but the provider counts arrivals, and a call
// held up on its way (scheduling, a GC pause, the network) arrives late
// while the next arrives on time: spacing slots exactly at the limit would
// let the provider see it exceeded. 10% covers a delay of a tenth of the
// window (100 ms at a per-second rate, 600 ms for a 6 s interval).
const DefaultHeadroom = 0.10

// WithHeadroom widens p's spacings by the share h.
func WithHeadroom(p store.Pacing, h float64) store.Pacing {
	widen := func(d time.Duration) time.Duration { return d + time.Duration(float64(d)*h) }
	return store.Pacing{Spacing: widen(p.Spacing), PerRecipient: widen(p.PerRecipient)}
}

func (d *drainer) add(f func(*Summary)) {
	d.mu.Lock()
	f(&d.sum)
	d.mu.Unlock()
}

// writeOutcomes writes a batch, retrying a failing database (a lock held
// too long by another process, a restart) with backoff for as long as the
// lease leaves time. It runs even after the drain was told to stop: an
// outcome we know must never be lost. If it still fails, the rows stay in
// sending under their lease, visible to msgq stuck, never resent.
func (d *drainer) writeOutcomes(params []store.TransitionParams) ([]store.TransitionResult, error) {
	deadline := time.Now().Add(d.cfg.Lease - d.cfg.CallTimeout)
	wait := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := d.cfg.Store.MessageTransitionMany(ctx, params)
		cancel()
		if err == nil || time.Now().Add(wait).After(deadline) || d.hard.Err() != nil {
			return res, err
		}
		d.cfg.Log.Warn("writing outcomes failed; retrying", "outcomes", len(params), "err", err, "in", wait)
		sleep(d.hard, wait)
		wait = min(wait*2, 5*time.Second)
	}
}

// LeaseStart is when a claim was asked for, on both of the drain's
// clocks (Config.Mono, Config.Wall).
type LeaseStart struct {
	Mono time.Duration
	Wall time.Time
}

// LeaseCheck says whether a call that starts after waiting wait can be
// over CallMargin before a lease of length lease, asked for at start,
// runs out, by both clocks as they read now (mono, wall). When it cannot,
// why says by how much the lease falls short and by which clock. A wall
// clock stepped back counts for nothing (the monotonic clock decides); one
// stepped forward, or a host that was suspended, makes the wall clock
// decide.
func LeaseCheck(start LeaseStart, lease, callTimeout, wait time.Duration, mono time.Duration, wall time.Time) (ok bool, why string) {
	byMono := lease - (mono - start.Mono)
	byWall := lease - wall.Sub(start.Wall)
	left, clock := byMono, "monotonic"
	if byWall < byMono {
		left, clock = byWall, "wall"
	}
	need := callTimeout + CallMargin
	if wait = max(wait, 0); left-wait >= need {
		return true, ""
	}
	if wait > 0 {
		return false, fmt.Sprintf("the pacing slot is %s away and would leave %s of the %s lease by the %s clock; the call needs %s (call timeout) + %s",
			round(wait), round(left-wait), lease, clock, callTimeout, CallMargin)
	}
	return false, fmt.Sprintf("%s of the %s lease left by the %s clock; the call needs %s (call timeout) + %s",
		round(left), lease, clock, callTimeout, CallMargin)
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// leaseOK runs LeaseCheck on the drain's clocks.
func (d *drainer) leaseOK(start LeaseStart, wait time.Duration) (bool, string) {
	return LeaseCheck(start, d.cfg.Lease, d.cfg.CallTimeout, wait, d.cfg.Mono(), d.cfg.Wall())
}

// send makes one call for a claimed row and records its outcome. It
// calls only while the lease, counted from start, provably covers the
// whole call: a drain that was frozen (SIGSTOP, a VM pause, swap, a
// suspended laptop) wakes up to give rows back, never to call on a lease
// that another process may have taken over.
func (d *drainer) send(ctx context.Context, c *store.Claimed, start LeaseStart) {
	cfg := d.cfg
	id := cfg.Identities[c.Identity]
	log := &rowLog{base: cfg.Log, c: c}

	// A slot that would end too close to the lease's end: give the row
	// back now rather than wait for a call that could not be made.
	wait := c.SlotAt.Sub(cfg.Now())
	if ok, why := d.leaseOK(start, wait); !ok {
		d.giveBack(c, log, why)
		return
	}
	// Wait for the pacing slot. If the run is cut off first, no call was
	// made: the row goes back to the queue (a definite retry).
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			d.record(c, log, provider.Result{Class: retry.Transient, RawError: "drain stopped before the call was made"},
				retry.Decision{Action: retry.Requeue, At: cfg.Now()}, time.Time{}, time.Time{}, "stopped before the call")
			return
		}
	}

	msg := &provider.Message{ID: c.ID, Key: providerKey(c.Tenant, c.Key), To: c.To, Channel: c.Channel}
	if c.Payload != nil {
		msg.Payload = *c.Payload
	}
	// The last guard for quiet hours, after the slot wait: a row the
	// enqueue or its retry could not schedule past the window (the
	// window or the identity's settings changed since, or the wait ran
	// into the window) waits for its end, no call made.
	if h, ok := id.Quiet.At(cfg.Now(), quietRow(c)); ok {
		d.record(c, log, provider.Result{Class: retry.Transient, RawError: QuietHeldError + ": " + h.String()},
			retry.Decision{Action: retry.Requeue, At: h.Until}, time.Time{}, time.Time{}, "held before any call: "+h.String())
		return
	}
	if cfg.OptedOut != nil {
		out, err := cfg.OptedOut(ctx, c.Identity, c.To)
		switch {
		case err != nil:
			// Not knowing is no licence to send: the row goes back, no
			// call made (a definite retry).
			d.record(c, log, provider.Result{Class: retry.Transient, RawError: "opt-out check: " + err.Error()},
				retry.Decision{Action: retry.Requeue, At: cfg.Now().Add(time.Second)}, time.Time{}, time.Time{}, "opt-out check failed")
			return
		case out:
			d.record(c, log, provider.Result{Class: retry.Permanent, RawError: OptedOutError},
				retry.Decision{Action: retry.MarkFailed, Reason: state.OptedOut}, time.Time{}, time.Time{},
				"refused before any call: the recipient opted out of "+c.Identity)
			return
		}
	}
	note := ""
	if msg.Payload.Text != "" && msg.Payload.FallbackTemplate != "" && strings.HasPrefix(c.LastError, store.FallbackNext) {
		// The provider refused this text on the last call (window
		// closed, nothing sent): the fallback goes instead.
		fb := msg.Payload.FallbackTemplate
		msg.Payload = fallbackPayload(msg.Payload)
		note = "the provider said the window is closed: sent fallback template " + fb
	} else if msg.Payload.Text != "" && cfg.WindowClosed != nil && cfg.WindowClosed(ctx, c.Identity, c.To) {
		if c.MaybeSent {
			// The text may already be on the phone: sending the fallback
			// as well could deliver both. A person decides.
			d.record(c, log, provider.Result{Class: retry.Permanent, RawError: "customer-service window closed after a call whose answer was lost"},
				retry.Decision{Action: retry.MarkFailed, Reason: state.Permanent}, time.Time{}, time.Time{}, "window closed")
			return
		}
		if fb := msg.Payload.FallbackTemplate; fb != "" {
			msg.Payload = fallbackPayload(msg.Payload)
			note = "window closed: sent fallback template " + fb
		} else {
			// No call is made, so putting the row back is a definite retry.
			d.record(c, log, provider.Result{Class: retry.Transient, RawError: store.WindowHeld},
				retry.Decision{Action: retry.Requeue, At: cfg.Now().Add(cfg.HoldFor)}, time.Time{}, time.Time{},
				"held: customer-service window closed and no fallback template")
			return
		}
	}
	if tpl := msg.Payload.Template; tpl != "" && cfg.TemplateHeld != nil {
		if lang, held := cfg.TemplateHeld(ctx, c.Identity, tpl, msg.Payload.Lang); held {
			// No call is made, so putting the row back is a definite
			// retry; the approval releases it at once.
			d.record(c, log, provider.Result{Class: retry.Transient, RawError: store.TemplateHeldError(tpl, lang)},
				retry.Decision{Action: retry.Requeue, At: cfg.Now().Add(store.TemplateHoldFor)}, time.Time{}, time.Time{},
				"held: template "+tpl+" reported paused, disabled or rejected")
			return
		}
	}
	// Right before the call, after the slot wait and the window read
	// (either may have been long, or the process frozen meanwhile).
	if ok, why := d.leaseOK(start, 0); !ok {
		d.giveBack(c, log, why)
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	started := cfg.Now()
	res := id.Provider.Send(callCtx, msg)
	finished := cfg.Now()
	cancel()

	var expires time.Time
	if c.ExpiresAt != nil {
		expires = *c.ExpiresAt
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = randFloat
	}
	table := retry.Table{Policy: id.Policy, Now: cfg.Now, Rand: rnd}
	dec := table.Decide(retry.Outcome{Class: res.Class, RetryAfter: res.RetryAfter, Idempotent: id.Provider.Idempotent()},
		c.Attempts, expires)
	if res.WindowClosed && msg.Payload.Text != "" && msg.Payload.FallbackTemplate != "" && !c.MaybeSent &&
		dec.Action == retry.MarkFailed && (expires.IsZero() || cfg.Now().Before(expires)) {
		// A definite refusal of the text (nothing was sent), and the row
		// has a fallback template: it goes next, at once, instead of the
		// row failing. last_error carries FallbackNext, which the next
		// claim reads. A row whose earlier call may have reached the
		// phone is left to fail as before: the fallback could deliver
		// twice.
		dec = retry.Decision{Action: retry.Requeue, At: cfg.Now()}
		note = strings.TrimPrefix(note+"; window closed: the fallback template "+msg.Payload.FallbackTemplate+" goes next", "; ")
	}
	if res.OptedOut && res.Class != retry.Accepted {
		d.optedOut(c, log, res, finished)
		if dec.Action == retry.MarkFailed {
			// A policy refusal: the provider sent nothing. A row an earlier
			// call of which may have reached the phone is still abandoned
			// (record), never made revivable.
			dec.Reason = state.OptedOut
		}
	}
	d.record(c, log, res, dec, started, finished, note)
}

// optedOut records the opt-out a provider's answer reported (Twilio's
// 21610), so that the next rows to the recipient are refused before any
// call. Its time is the answer's. A failure to record is logged: the row's
// own outcome is recorded all the same, and the provider keeps refusing.
func (d *drainer) optedOut(c *store.Claimed, log *rowLog, res provider.Result, at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := "send answer, code " + orNone(res.Code)
	changed, err := d.cfg.Store.SetOptOut(ctx, store.OptOutParams{Identity: c.Identity, Recipient: c.To, OptedOut: true, Source: src, At: at})
	switch {
	case err != nil:
		log.Error("record the opt-out the provider reported", "err", err)
	case changed:
		log.Warn("the provider says the recipient opted out: recorded", "source", src)
	}
}

// QuietHeldError begins the last error of a row the drain gave back
// because its recipient's quiet hours had begun.
const QuietHeldError = "held for quiet hours"

// quietRow is what the quiet-hours policy reads of a row.
func quietRow(c *store.Claimed) quiet.Row {
	r := quiet.Row{To: c.To, Channel: c.Channel, Lane: c.Lane, Purpose: c.Purpose}
	if c.Payload != nil {
		r.Override = c.Payload.QuietHours
	}
	return r
}

// OptedOutError is the last error of a row refused because its recipient
// opted out.
const OptedOutError = "the recipient opted out of this identity (STOP); sends resume after they opt in again (START)"

// giveBack returns a claimed row to the queue without a call: the lease
// check failed. The attempt the claim counted is given back (NoCall), the
// row's last error is left alone, and the history says why. If the row
// was taken over meanwhile, the entry is kept on it all the same (not
// applied): it shows this drain made no call.
func (d *drainer) giveBack(c *store.Claimed, log *rowLog, why string) {
	log.Warn("lease check failed: row given back without a call", "why", why)
	d.add(func(s *Summary) { s.GivenBack++ })
	p := store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: d.cfg.Owner, LeaseUntil: leaseUntil(c), KeepIfStale: true,
		Event: state.Event{Kind: state.Retry}, NoCall: true, Source: store.SourceDrain, // due at once, on the store's clock
		Detail: "lease check: " + why + ": given back without a call"}
	d.outcomes <- &outcome{p: p, finish: func(r store.TransitionResult) {
		switch {
		case errors.Is(r.Err, store.ErrStale):
			log.Warn("the row given back had been taken over already; the give-back is noted on it", "err", r.Err)
			d.add(func(s *Summary) { s.LeaseLost++ })
		case r.Err != nil:
			// The row stays in sending under its lease, never called:
			// reconcile takes it over once the lease is over.
			log.Error("give back", "err", r.Err)
			d.add(func(s *Summary) { s.Unrecorded++ })
		}
	}}
}

// leaseUntil is the claim's own lease end (zero if the store gave none).
func leaseUntil(c *store.Claimed) time.Time {
	if c.LeaseUntil == nil {
		return time.Time{}
	}
	return *c.LeaseUntil
}

// fallbackPayload is what goes instead of a text when the window is
// closed: its fallback template, with its parameters.
func fallbackPayload(p store.Payload) store.Payload {
	return store.Payload{Template: p.FallbackTemplate, Lang: fallbackLang(p), Params: p.FallbackParams}
}

// fallbackLang is the language for a fallback template: the row's own if it
// named one, else the default.
func fallbackLang(p store.Payload) string {
	if p.Lang != "" {
		return p.Lang
	}
	return "en"
}

// record writes one outcome through the state machine, conditionally on
// still holding the lease. It runs even after the drain was told to stop:
// an outcome we know must never be lost.
func (d *drainer) record(c *store.Claimed, log *rowLog, res provider.Result, dec retry.Decision, started, finished time.Time, note string) {
	cfg := d.cfg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if res.Class == retry.RateLimited && dec.Action == retry.Requeue {
		// The limit is the identity's (or, for a pair limit, that
		// recipient's), not this row's: every drain holds off until the
		// row's own retry time (the stated delay or longer).
		rcpt := ""
		if res.RecipientOnly {
			rcpt = c.To
		}
		if err := cfg.Store.PaceDefer(ctx, c.Identity, rcpt, dec.At); err != nil {
			log.Error("slow down after a rate limit", "err", err)
		}
	}
	// A retry due inside the recipient's quiet hours waits for their end
	// (checked after the rate-limit deferral above, which is the
	// identity's, not this recipient's).
	var quietUntil time.Time
	if dec.Action == retry.Requeue && !dec.At.IsZero() {
		if id := cfg.Identities[c.Identity]; id != nil {
			if h, ok := id.Quiet.At(dec.At, quietRow(c)); ok {
				dec.At, quietUntil = h.Until, h.Until
				note = strings.TrimPrefix(note+"; the retry falls in "+h.String(), "; ")
			} else if strings.HasPrefix(res.RawError, QuietHeldError) {
				quietUntil = dec.At
			}
		}
	}
	if dec.Action == retry.PauseIdentity {
		reason := fmt.Sprintf("%s (HTTP %d, code %s)", res.Class, res.HTTPStatus, orNone(res.Code))
		if err := cfg.Store.IdentityPause(ctx, c.Identity, reason); err != nil {
			log.Error("pause identity", "err", err)
		} else {
			log.Warn("identity paused", "reason", reason)
			d.add(func(s *Summary) { s.Paused++ })
		}
	}
	ev := dec.Event()
	// This call, or an earlier one, may have reached the phone: a row that
	// then runs out of attempts or time is unknown, not failed.
	// A provider refusing a retry of such a row is no proof either: the
	// retry may differ from the first call (a provider that compares
	// bodies, or keys that are not honoured after all).
	maybeSent := res.Class == retry.Ambiguous
	if dec.Action == retry.MarkFailed && (maybeSent || c.MaybeSent) {
		ev = state.Event{Kind: state.Abandon}
		note = strings.TrimPrefix(note+"; an earlier call's answer was lost and it may have reached the phone", "; ")
	}
	det := detail(res, dec)
	if note != "" {
		det = note + "; " + det
	}
	// KeepIfStale: an answer that finds the row taken over (a late answer
	// after a freeze) is kept on it as evidence, never dropped. The retry
	// is scheduled as a delay from the store's clock, not at a time read
	// here: the store decides when rows are due on its own clock
	// (PostgreSQL: the server's), whatever this host's says.
	p := &store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: cfg.Owner, LeaseUntil: leaseUntil(c), KeepIfStale: true,
		Event: ev, MaybeSent: maybeSent,
		NoCall: started.IsZero(), Source: store.SourceDrain, Detail: det, ProviderID: res.ProviderID}
	switch {
	case !quietUntil.IsZero():
		// The end of a quiet window is an instant, the same on every
		// clock: scheduled as a time, not as a delay, so that the row is
		// never due a moment before the window ends.
		p.NextAttemptAt = quietUntil
	case !dec.At.IsZero():
		p.NextAttemptIn = max(0, dec.At.Sub(cfg.Now()))
	}
	if res.Class != retry.Accepted {
		p.LastError = lastError(res)
		if res.WindowClosed && dec.Action == retry.Requeue {
			p.LastError = store.FallbackNext + "\n" + p.LastError
		}
	}
	if !started.IsZero() {
		p.Attempt = &store.Attempt{Number: c.Attempts, StartedAt: started, FinishedAt: finished, Class: string(res.Class),
			HTTPStatus: res.HTTPStatus, ProviderCode: res.Code, ProviderSubcode: res.Subcode, RawError: res.RawError,
			Latency: finished.Sub(started)}
	}
	d.outcomes <- &outcome{p: *p, finish: func(r store.TransitionResult) { d.recorded(log, res, dec, r) }, decided: time.Now()}
}

// recorded logs and counts what the store made of one outcome.
func (d *drainer) recorded(log *rowLog, res provider.Result, dec retry.Decision, r store.TransitionResult) {
	err := r.Err
	switch {
	case errors.Is(err, store.ErrStale):
		// Someone else (reconcile, an operator) took the row after our
		// lease expired; their word stands. The store kept this answer
		// on the row (its attempt, and history not applied).
		log.Warn("lease lost before the outcome was recorded; kept on the row as evidence, not applied", "outcome", dec.Action, "err", err)
		d.add(func(s *Summary) { s.LeaseLost++ })
		return
	case err != nil:
		// The row stays in sending with its lease: reconcile makes it
		// unknown, never a silent resend.
		log.Error("record outcome", "outcome", dec.Action, "err", err)
		d.add(func(s *Summary) { s.Unrecorded++ })
		return
	}
	log.Debug("outcome", "state", r.State, "class", res.Class, "http", res.HTTPStatus, "code", res.Code)
	d.add(func(s *Summary) {
		switch r.State {
		case state.Sent:
			s.Sent++
		case state.Queued:
			s.Retried++
		case state.Failed:
			s.Failed++
		case state.Unknown:
			s.Unknown++
		}
	})
}

func detail(res provider.Result, dec retry.Decision) string {
	switch dec.Action {
	case retry.MarkSent:
		if res.Replayed {
			return "accepted (replay of an earlier call)"
		}
		return "accepted"
	case retry.Requeue, retry.PauseIdentity:
		return fmt.Sprintf("%s; next attempt %s", res.Class, dec.At.UTC().Format(time.RFC3339Nano))
	}
	return string(res.Class)
}

// lastError is the provider's error verbatim: its body, or the transport
// error; the code alone when there is neither.
func lastError(res provider.Result) string {
	if res.RawError != "" {
		return res.RawError
	}
	if res.Code != "" {
		return "code " + res.Code
	}
	return string(res.Class)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// providerKey is the idempotency key sent to the provider. Keys are unique
// per tenant, but a provider account may serve several tenants, so other
// tenants' keys are hashed with their tenant into the 64 characters
// idempotent APIs accept.
func providerKey(tenant, key string) string {
	if tenant == store.DefaultTenant {
		return key
	}
	// Hashed, never joined: tenants and keys may both contain ":", so
	// "a" + "b:c" and "a:b" + "c" must not meet. Keys of the default
	// tenant are users' own and never 64 characters of "t:" and hex.
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return "t:" + hex.EncodeToString(sum[:])[:62]
}

func randFloat() float64 { return rand.Float64() }

func waitOne(ctx context.Context, done <-chan struct{}, max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// rowLog is a claimed row's logger, made only when a line is written at an
// enabled level: most rows write none (their outcome line is at debug
// level), and slog's handlers format a logger's attributes (here the
// masked recipient among them) when it is made, which cost every drained
// row several allocations and a phone-number parse.
type rowLog struct {
	base *slog.Logger
	c    *store.Claimed
}

func (r *rowLog) log(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !r.base.Enabled(ctx, level) {
		return
	}
	c := r.c
	r.base.With("id", c.ID, "key", c.Key, "to", recipient.Mask(c.Channel, c.To), "identity", c.Identity, "attempt", c.Attempts).
		Log(ctx, level, msg, args...)
}

func (r *rowLog) Debug(msg string, args ...any) { r.log(slog.LevelDebug, msg, args...) }
func (r *rowLog) Warn(msg string, args ...any)  { r.log(slog.LevelWarn, msg, args...) }
func (r *rowLog) Error(msg string, args ...any) { r.log(slog.LevelError, msg, args...) }
