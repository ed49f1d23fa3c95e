package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/store"
)

type drainOptions struct {
	follow      bool
	concurrency int
	maxDuration time.Duration
	maxMessages int
	lane        string
	identities  []string
	lease       time.Duration
	callTimeout time.Duration
	grace       time.Duration
	poll        time.Duration
	holdFor     time.Duration
}

func (o *drainOptions) Validate(cfg *config) error {
	switch {
	case o.concurrency <= 0:
		return usagef("--concurrency must be positive")
	case o.maxDuration < 0 || o.maxMessages < 0:
		return usagef("--max-duration and --max-messages cannot be negative")
	case o.lane != "" && o.lane != store.LaneReply && o.lane != store.LaneBulk:
		return usagef("--lane must be reply or bulk (got %q)", o.lane)
	case o.callTimeout <= 0 || o.grace <= 0 || o.poll <= 0 || o.holdFor <= 0:
		return usagef("--call-timeout, --grace, --poll and --hold-for must be positive")
	case o.lease < o.callTimeout+10*time.Second:
		return usagef("--lease %s must exceed --call-timeout %s by at least 10s: a lease that ends mid-call makes the row stuck", o.lease, o.callTimeout)
	}
	for _, n := range o.identities {
		if _, ok := cfg.Identities[n]; !ok {
			return usagef("--identity %s is not configured (see msgq identities)", n)
		}
	}
	return nil
}

func newDrainCmd(a *app) *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Send what is due, exactly once, then exit (or keep going with --follow)",
		Long: `Claim due messages, send each through its identity's provider, and record the
outcome. Each claim is committed (durably) before the provider is called, with a
lease; the outcome is written only while the lease is still held. A call whose
answer is lost becomes "unknown" (or is retried with the same key when the
provider deduplicates by key): it is never sent again blindly.

Leases and freezes: a call starts only while the lease, counted from before
the claim was asked for on both the monotonic and the wall clock, has the
whole --call-timeout plus ` + drain.CallMargin.String() + ` left. A row whose pacing slot comes too late for
that, or whose drain was frozen (SIGSTOP, a VM pause, swap, a suspended
laptop) or saw its wall clock jump, is given back to the queue without a call:
its attempt count is unchanged and its history says why ("lease check: ...").
Whoever takes a lease over (msgq reconcile, msgq resolve) waits until ` + store.TakeoverMargin.String() + ` past
its end (the takeover margin), so a drain that checked just before the end is
done calling by then. An answer that arrives after its row was taken over is
kept on the row as evidence (an attempt and a history entry, not applied).

Without --follow, drain exits 0 as soon as nothing is eligible: run it from cron.
With --follow it keeps going; when idle it looks again every --poll, and on
PostgreSQL it also wakes as soon as any process enqueues (LISTEN/NOTIFY; not
behind a transaction pooler, where it says so once and polls).
SIGINT/SIGTERM stop claiming; calls in flight get --grace to finish and their
outcomes are recorded. A one-line summary goes to stderr; -o json prints it as
an object on stdout.

` + exitStatusHelp,
		Example: `  msgq drain
  msgq drain --follow --concurrency 32
  msgq drain --lane reply --identity shop --max-duration 50s`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(a.cfg); err != nil {
				return err
			}
			// Only the identities this drain sends for need their secrets:
			// those named with --identity must have them; of the others,
			// the ones without are skipped and their rows stay queued for a
			// drain that has them.
			chosen := a.cfg.Identities
			if len(o.identities) > 0 {
				chosen = map[string]*identities.Identity{}
				for _, n := range o.identities {
					chosen[n] = a.cfg.Identities[n]
				}
			}
			ids, skipped, err := drainIdentities(chosen, len(o.identities) > 0)
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				return usagef("no identity can send from here: %s", skippedList(skipped))
			}
			warnAt, err := a.cfg.clockWarn()
			if err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				if cmd.Context().Err() != nil {
					// Told to stop while still opening the store: nothing
					// was claimed, so this is a clean stop, not a failure.
					fmt.Fprintln(a.ios.Err, "drain: stopped before it started; nothing claimed")
					return nil
				}
				return err
			}
			warnSkipped(a, "drain", skipped, queuedStay(cmd.Context(), st, skipped))
			// The drain times what it still times itself (slot waits,
			// backoffs, its lease) on the store's clock as measured from
			// this host; the store decides on its own clock.
			owner := leaseOwner()
			clk := newClockWatch(a, st, "drain", owner, warnAt, false)
			watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(cmd.Context()))
			defer stopWatch()
			clk.Start(watchCtx)
			cfg := drain.Config{
				Store: st, Identities: ids, Owner: owner, Lease: o.lease, CallTimeout: o.callTimeout,
				Concurrency: o.concurrency, Lane: o.lane, Only: o.identities, Follow: o.follow,
				MaxDuration: o.maxDuration, MaxMessages: o.maxMessages, Grace: o.grace, IdlePoll: o.poll, Log: a.log,
				WindowClosed: drain.StoreWindow(st, windowOf(a.cfg.Identities), clk.Now, a.log), HoldFor: o.holdFor, Now: clk.Now,
				TemplateHeld: drain.StoreTemplateHolds(st, time.Now, a.log),
				OptedOut:     st.OptedOut,
			}
			if adm := intakeAdmission(a, st, clk.Now); adm != nil {
				// A few batches at a time: a backlog in intake must not
				// hold the claims of what is queued already.
				adm.Rounds = 4
				cfg.Admit = adm.Run
			}
			sum, err := drain.Run(cmd.Context(), cfg)
			stopWatch()
			fmt.Fprintf(a.ios.Err, "drain: claimed %d, sent %d, retried %d, failed %d, unknown %d, identity pauses %d, leases lost %d, given back %d (%.1fs)\n",
				sum.Claimed, sum.Sent, sum.Retried, sum.Failed, sum.Unknown, sum.Paused, sum.LeaseLost, sum.GivenBack, sum.Seconds)
			if sum.Admitted > 0 || sum.Invalid > 0 || sum.IntakeExpired > 0 {
				fmt.Fprintf(a.ios.Err, "drain: rows taken in by SQL: admitted %d, failed as invalid %d, expired before admission %d\n",
					sum.Admitted, sum.Invalid, sum.IntakeExpired)
			}
			if a.cfg.Output == outJSON {
				if perr := printJSON(a.ios.Out, sum); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.follow, "follow", false, "keep draining until interrupted (default: exit when nothing is eligible)")
	f.IntVar(&o.concurrency, "concurrency", 8, "provider calls in flight at once")
	f.DurationVar(&o.maxDuration, "max-duration", 0, "stop claiming after this long (0: no limit)")
	f.IntVar(&o.maxMessages, "max-messages", 0, "stop claiming after this many messages (0: no limit)")
	f.StringVar(&o.lane, "lane", "", "only this lane: reply or bulk")
	f.StringArrayVar(&o.identities, "identity", nil, "only this identity (repeat for more)")
	f.DurationVar(&o.lease, "lease", 5*time.Minute, "how long a claim is held; at least --call-timeout + 10s. A call starts only with --call-timeout + "+drain.CallMargin.String()+
		" of it left; reconcile and resolve take a row over only "+store.TakeoverMargin.String()+" after it ends")
	f.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "how long one provider call may take; a call starts only while the lease has this + "+drain.CallMargin.String()+" left")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGINT/SIGTERM, how long calls in flight may finish")
	f.DurationVar(&o.holdFor, "hold-for", time.Hour, "how long free-form text to a closed customer-service window (with no fallback template) waits before it is tried again")
	addClockWarnFlag(cmd)
	f.DurationVar(&o.poll, "poll", 2*time.Second, "with --follow, how often an idle drain looks for due rows (on PostgreSQL an enqueue also wakes it at once, except behind a transaction pooler)")
	return cmd
}

// leaseOwner names this process in leases: host, pid and a random suffix
// (pids are reused).
func leaseOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// skippedList says, for a message, which identities lack which secrets.
func skippedList(skipped []identities.Skipped) string {
	parts := make([]string, 0, len(skipped))
	for _, s := range skipped {
		parts = append(parts, fmt.Sprintf("identity %s: %s not set", s.Name, strings.Join(s.Missing, ", ")))
	}
	return strings.Join(parts, "; ")
}

// warnSkipped writes one line on stderr per identity a command skips for
// want of its secrets, saying what that leaves undone.
func warnSkipped(a *app, cmdName string, skipped []identities.Skipped, then func(identities.Skipped) string) {
	for _, s := range skipped {
		fmt.Fprintf(a.ios.Err, "%s: skipping identity %s: %s not set in this environment; %s\n",
			cmdName, s.Name, strings.Join(s.Missing, ", "), then(s))
	}
}

// queuedStay is drain's consequence of a skipped identity: its rows wait,
// visible in msgq identities and msgq health --max-unsendable.
func queuedStay(ctx context.Context, st store.Store, skipped []identities.Skipped) func(identities.Skipped) string {
	queued := map[string]int{}
	if len(skipped) > 0 {
		if states, err := st.IdentityStates(ctx); err == nil {
			for _, s := range states {
				queued[s.Name] = s.Queued
			}
		}
	}
	return func(s identities.Skipped) string {
		return fmt.Sprintf("its %d queued rows stay queued", queued[s.Name])
	}
}

// drainIdentities builds the drain's view of the identities that can
// send from this process. An identity whose token is not in the
// environment is skipped (its rows stay queued, for a drain that has it),
// unless required names it: asked for by name, a missing token is bad
// input.
func drainIdentities(ids map[string]*identities.Identity, required bool) (map[string]*drain.Identity, []identities.Skipped, error) {
	out := map[string]*drain.Identity{}
	var skipped []identities.Skipped
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		id := ids[n]
		if miss := id.MissingSendEnv(); len(miss) > 0 && !required {
			skipped = append(skipped, identities.Skipped{Name: n, Missing: miss})
			continue
		}
		p, err := id.Provider()
		if err != nil {
			return nil, nil, err
		}
		out[n] = &drain.Identity{Name: n, Provider: p, Policy: id.Policy, Pacing: id.Pacing, Headroom: id.Config.PacingHeadroom,
			Quiet: id.Quiet, DailyRecipients: id.DailyRecipients}
	}
	return out, skipped, nil
}

// windowOf is each identity's customer-service window (zero: none, or not
// configured).
func windowOf(ids map[string]*identities.Identity) func(identity string) time.Duration {
	return func(identity string) time.Duration {
		if id := ids[identity]; id != nil {
			return id.Window
		}
		return 0
	}
}
