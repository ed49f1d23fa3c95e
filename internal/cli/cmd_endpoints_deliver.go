package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/events"
	"github.com/msgq/msgq/internal/retry"
)

type deliverOptions struct {
	follow      bool
	concurrency int
	timeout     time.Duration
	lease       time.Duration
	poll        time.Duration
	maxAttempts int
	backoffBase time.Duration
	backoffCap  time.Duration
}

func (o *deliverOptions) Validate() error {
	switch {
	case o.concurrency <= 0:
		return usagef("--concurrency must be positive")
	case o.timeout <= 0 || o.poll <= 0:
		return usagef("--timeout and --poll must be positive")
	case o.lease < o.timeout+events.Margin:
		return usagef("--lease %s must exceed --timeout %s by at least %s: a delivery starts only while the lease outlasts it", o.lease, o.timeout, events.Margin)
	case o.maxAttempts < 1:
		return usagef("--max-attempts must be at least 1")
	case o.backoffBase <= 0 || o.backoffCap < o.backoffBase:
		return usagef("--backoff-base must be positive and --backoff-cap at least as long")
	}
	return nil
}

func newEndpointsDeliverCmd(a *app) *cobra.Command {
	def := events.DefaultPolicy()
	o := &deliverOptions{}
	cmd := &cobra.Command{
		Use:   "deliver",
		Short: "Deliver the status events that are due, then exit (or keep going with --follow)",
		Long: `Claim due status events with a lease (so that many deliver processes, or
msgq serve, can run at once), POST each to its endpoint signed the Standard
Webhooks way, and record the outcome. A 2xx answer is a delivery; anything else
(or no answer within --timeout) is retried with exponential backoff and full
jitter (--backoff-base doubling to --backoff-cap; a 429 or 503's Retry-After is
honoured), and after --max-attempts the event is dead: msgq endpoints list
shows it, msgq endpoints retry sends it again.

A message's events go out in order, one at a time: a later one waits until the
earlier one is delivered or dead. Delivery is at least once: a process killed
after its POST and before recording it leaves the event to be delivered again
when its lease ends, with the same webhook-id, so the application can drop the
duplicate.

Without --follow, deliver exits 0 as soon as nothing is due: run it from cron.
With --follow it keeps going, looking again every --poll when idle. A one-line
summary goes to stderr; -o json prints it as an object on stdout.

` + exitStatusHelp,
		Example: `  msgq endpoints deliver
  msgq endpoints deliver --follow --concurrency 16`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			d := &events.Dispatcher{Store: st, Owner: leaseOwner(), Timeout: o.timeout, Lease: o.lease, Concurrency: o.concurrency,
				Follow: o.follow, Poll: o.poll, Log: a.log,
				Policy: retry.Policy{Base: o.backoffBase, Factor: def.Factor, Cap: o.backoffCap, MaxAttempts: o.maxAttempts}}
			sum, err := d.Run(cmd.Context())
			fmt.Fprintf(a.ios.Err, "endpoints deliver: claimed %d, delivered %d, failed %d (dead %d), given back %d (%.1fs)\n",
				sum.Claimed, sum.Delivered, sum.Failed, sum.Dead, sum.GivenBack, sum.Seconds)
			if a.cfg.Output == outJSON {
				if perr := printJSON(a.ios.Out, sum); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.follow, "follow", false, "keep delivering until interrupted (default: exit when nothing is due)")
	f.IntVar(&o.concurrency, "concurrency", 8, "deliveries in flight at once")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long one POST may take")
	f.DurationVar(&o.lease, "lease", 30*time.Second, "how long a claim holds an event; at least --timeout + "+events.Margin.String())
	f.DurationVar(&o.poll, "poll", time.Second, "with --follow, how often an idle deliver looks for due events")
	f.IntVar(&o.maxAttempts, "max-attempts", def.MaxAttempts, "attempts per event before it is dead")
	f.DurationVar(&o.backoffBase, "backoff-base", def.Base, "the first retry's backoff ceiling (doubling per attempt)")
	f.DurationVar(&o.backoffCap, "backoff-cap", def.Cap, "the largest backoff ceiling")
	return cmd
}
