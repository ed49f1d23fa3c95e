package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/drain"
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
			// Only the identities this drain serves need their secrets.
			chosen := a.cfg.Identities
			if len(o.identities) > 0 {
				chosen = map[string]*identity{}
				for _, n := range o.identities {
					chosen[n] = a.cfg.Identities[n]
				}
			}
			ids, err := drainIdentities(chosen)
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
			sum, err := drain.Run(cmd.Context(), drain.Config{
				Store: st, Identities: ids, Owner: leaseOwner(), Lease: o.lease, CallTimeout: o.callTimeout,
				Concurrency: o.concurrency, Lane: o.lane, Only: o.identities, Follow: o.follow,
				MaxDuration: o.maxDuration, MaxMessages: o.maxMessages, Grace: o.grace, IdlePoll: o.poll, Log: a.log,
				WindowClosed: windowClosed(a, st), HoldFor: o.holdFor,
			})
			fmt.Fprintf(a.ios.Err, "drain: claimed %d, sent %d, retried %d, failed %d, unknown %d, identity pauses %d, leases lost %d (%.1fs)\n",
				sum.Claimed, sum.Sent, sum.Retried, sum.Failed, sum.Unknown, sum.Paused, sum.LeaseLost, sum.Seconds)
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
	f.DurationVar(&o.lease, "lease", 5*time.Minute, "how long a claim is held; must exceed --call-timeout")
	f.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "how long one provider call may take")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGINT/SIGTERM, how long calls in flight may finish")
	f.DurationVar(&o.holdFor, "hold-for", time.Hour, "how long free-form text to a closed customer-service window (with no fallback template) waits before it is tried again")
	f.DurationVar(&o.poll, "poll", 2*time.Second, "with --follow, how often an idle drain looks for due rows (on PostgreSQL an enqueue also wakes it at once, except behind a transaction pooler)")
	return cmd
}

// windowClosed says whether an identity's customer-service window with a
// recipient is closed: the recipient has not written within the
// identity's service_window (none enforced: never closed). A store error
// counts as open: the provider's own refusal (WhatsApp 131047) is the
// backstop, and it cannot send anything twice.
func windowClosed(a *app, st store.Store) func(ctx context.Context, identity, recipient string) bool {
	return func(ctx context.Context, identity, recipient string) bool {
		id := a.cfg.Identities[identity]
		if id == nil || id.Window <= 0 {
			return false
		}
		last, err := st.ServiceWindow(ctx, identity, recipient)
		if err != nil {
			a.log.Warn("drain: reading the customer-service window failed; sending as if open", "identity", identity, "err", err)
			return false
		}
		return last.IsZero() || !a.now().Before(last.Add(id.Window))
	}
}

// leaseOwner names this process in leases: host, pid and a random suffix
// (pids are reused).
func leaseOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
