package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/sim"
)

func newSimCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the fault-injecting provider simulator",
		Long: `The simulator plays a messaging provider with injected faults and logs every
message that reached the phone: the oracle for exactly-once tests.

` + exitStatusHelp,
		// Without this a mistyped subcommand would print the help and exit 0.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for \"msgq sim\" (want serve)", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newSimServeCmd(a))
	return cmd
}

type simServeOptions struct {
	addr string
	cfg  sim.Config
}

// validate checks every flag, naming the first bad one as the user typed it.
func (o *simServeOptions) validate() error {
	c := &o.cfg
	for _, f := range []struct {
		name string
		p    float64
	}{
		{"fault-429", c.Fault429}, {"fault-5xx", c.Fault5xx}, {"fault-permanent", c.FaultPermanent},
		{"fault-pair", c.FaultPair}, {"fault-drop", c.FaultDrop}, {"fault-slow", c.FaultSlow},
	} {
		if !(f.p >= 0 && f.p <= 1) { // NaN included
			return usagef("--%s must be a probability between 0 and 1 (got %v)", f.name, f.p)
		}
	}
	if c.Latency < 0 {
		return usagef("--latency must not be negative (got %v)", c.Latency)
	}
	if c.SlowDelay <= 0 {
		return usagef("--slow-delay must be greater than 0 (got %v)", c.SlowDelay)
	}
	if err := c.Validate(); err != nil { // the sum of the probabilities
		return usagef("%v", err)
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usagef("--addr %q: %v", o.addr, err)
	}
	return nil
}

func newSimServeCmd(a *app) *cobra.Command {
	o := &simServeOptions{cfg: sim.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the simulated provider APIs over HTTP",
		Long: `Serve the simulated provider APIs over HTTP until interrupted (SIGINT or SIGTERM):

  POST   /v1/messages                           the generic http API (Idempotency-Key)
  GET    /v1/messages/{id}                      look-up
  POST   /{version}/{phone-number-id}/messages  the WhatsApp Cloud API send
  GET    /deliveries                            every message that reached the phone, in order
  DELETE /deliveries                            empty that log

Any non-empty bearer token is accepted. Each send that passes authentication
and validation takes one draw from a random source seeded by --seed and gets
at most one fault, tested in this order: 429, 5xx, permanent, pair, drop,
slow. The probabilities may add up to at most 1.

  --fault-429        refused: rate limited (http: 429 + Retry-After: 1; WhatsApp: 400, code 130429)
  --fault-5xx        refused: server error (http: 500 internal; WhatsApp: 500, code 131000)
  --fault-permanent  refused: undeliverable (http: 422 invalid_recipient; WhatsApp: 400, code 131026)
  --fault-pair       refused: pair rate limit (http: 429 pair_rate_limited; WhatsApp: 400, code 131056)
  --fault-drop       processed (a new message is delivered), then the connection is
                     closed without an answer
  --fault-slow       processed (a new message is delivered), answered only after
                     --slow-delay, i.e. after the client gave up

Refused sends deliver nothing and leave no idempotency key behind. A dropped
or slow send is processed exactly as with no fault: a key already accepted is
replayed, not delivered again. --latency
delays every send before it is decided. With --idempotent=false the http API
ignores Idempotency-Key: every accepted call is a new delivery. The WhatsApp
API has no idempotency key at all.

One line, "sim: listening on http://ADDR", is printed to stderr once the
server listens (with --addr 127.0.0.1:0 it names the port chosen).

` + exitStatusHelp,
		Example: `  msgq sim serve
  msgq sim serve --addr 127.0.0.1:0 --seed 7 --fault-429 0.1 --fault-drop 0.05
  msgq sim serve --fault-slow 0.2 --slow-delay 5s --latency 50ms --idempotent=false
  curl -s localhost:8099/deliveries`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runSimServe(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	c := &o.cfg
	f.StringVar(&o.addr, "addr", "127.0.0.1:8099", "listen on this host:port (port 0: any free port)")
	f.Float64Var(&c.Fault429, "fault-429", 0, "probability of a rate-limit refusal with Retry-After")
	f.Float64Var(&c.Fault5xx, "fault-5xx", 0, "probability of a retryable server error")
	f.Float64Var(&c.FaultPermanent, "fault-permanent", 0, "probability of a permanent refusal")
	f.Float64Var(&c.FaultPair, "fault-pair", 0, "probability of a WhatsApp pair rate limit (131056)")
	f.Float64Var(&c.FaultDrop, "fault-drop", 0, "probability of accepting, then closing the connection without an answer")
	f.Float64Var(&c.FaultSlow, "fault-slow", 0, "probability of accepting, then answering only after --slow-delay")
	f.DurationVar(&c.SlowDelay, "slow-delay", sim.DefaultSlowDelay, "how long a slow answer takes")
	f.DurationVar(&c.Latency, "latency", 0, "delay before every send is decided")
	f.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the fault decisions: one seed, one sequence of outcomes")
	f.BoolVar(&c.Idempotent, "idempotent", true, "honour Idempotency-Key on the http API")
	return cmd
}

func runSimServe(ctx context.Context, a *app, o *simServeOptions) error {
	s := sim.New(o.cfg)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		// Long enough for the slowest answer the flags allow.
		WriteTimeout:   o.cfg.Latency + o.cfg.SlowDelay + time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		// Handlers waiting out a latency or a slow answer stop at shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(a.ios.Err, "sim: listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err // Serve never returns nil
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("sim: shutting down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
