package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/httpserve"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
)

type webhookServeOptions struct {
	addr       string
	maxBody    int64
	maxPending int64
	maxConns   int
	tolerance  time.Duration
	process    bool
	poll       time.Duration
	grace      time.Duration
	clockWarn  time.Duration
	publicURL  string
}

func (o *webhookServeOptions) Validate() error {
	switch {
	case o.addr == "":
		return usagef("--addr is required, e.g. :8080")
	case o.maxBody <= 0:
		return usagef("--max-body must be positive")
	case o.maxPending < o.maxBody:
		return usagef("--max-pending (%d) must be at least --max-body (%d), or no body of the largest size could ever be read", o.maxPending, o.maxBody)
	case o.maxConns <= 0:
		return usagef("--max-conns must be positive")
	case o.tolerance <= 0 || o.poll <= 0 || o.grace <= 0:
		return usagef("--tolerance, --poll and --grace must be positive")
	case o.publicURL != "" && !validPublicURL(o.publicURL):
		return usagef("--public-url must be a scheme and host like https://hooks.example.com (got %q)", o.publicURL)
	}
	return nil
}

func newWebhookServeCmd(a *app) *cobra.Command {
	o := &webhookServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Receive webhooks: verify, store raw, answer 200, then process",
		Long: `Serve the webhook endpoints:

  GET  /webhooks/whatsapp   Meta's verification handshake (verify_token_env)
  POST /webhooks/whatsapp   WhatsApp Cloud API, signed with X-Hub-Signature-256 (app_secret_env)
  POST /webhooks/http       the http provider, signed with Standard Webhooks (webhook_secret_env)
  GET  /healthz             200 while the store is reachable

and, for each identity whose webhooks are received, /webhooks/PROVIDER/IDENTITY
(e.g. /webhooks/whatsapp/shop): the same, verified with that identity's secrets
alone. On the shared paths each identity's secrets are tried in turn; the one
that verifies a delivery is the identity it is filed under.

A delivery with a missing or wrong signature (or a Standard Webhooks timestamp
further than --tolerance from now) gets 401, a body over --max-body 413, a body
that is not the provider's webhook 400; none of them is stored. A valid delivery
is stored raw and durably and only then answered 200; if it cannot be stored the
answer is 500, so the provider retries. A copy of a delivery its identity has
stored already (the same webhook-id for Standard Webhooks, else the same signed
body) is answered 200 and not stored again, only counted (stats: replayed
webhooks), so a captured delivery replayed without end costs no disk. Unless --process=false, a worker then
processes stored deliveries (run msgq webhook process from cron otherwise).
SIGINT/SIGTERM stop accepting, let requests in progress finish, and exit 0.
Started while its PostgreSQL server cannot be reached, it listens anyway and
answers 503 with Retry-After (nothing stored) until the store opens; any other
store error at start ends it.

Memory is bounded before any signature is checked. A request without a
well-formed signature header (or with a stale timestamp) is refused before its
body is read. Bodies held in memory at once (read, being verified, or waiting
for their write) are capped at --max-pending bytes: a body that does not fit is
answered 503 with Retry-After, unread, and its provider retries later. An eighth
of --max-pending is kept for bodies of 64 KiB or less, the size real deliveries
have, so a flood of large bodies does not crowd them out. At most --max-conns
connections are open at once (more wait to be accepted); near the cap, idle
keep-alive connections are closed. Memory taken by a burst is handed back to
the operating system once it is over. The process's Go memory limit is set to
twice --max-pending plus 64 MiB unless GOMEMLIMIT is set.

` + exitStatusHelp,
		Example: `  msgq webhook serve --addr :8080
  msgq webhook serve --addr 127.0.0.1:8080 --process=false   # receive only; process from cron`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			routes, skipped, err := webhookRoutes(a.cfg.Identities)
			if err != nil {
				return err
			}
			wc := webhook.Config{Routes: routes, PublicURL: o.publicURL}
			if len(routes) == 0 {
				if len(skipped) > 0 {
					return usagef("no identity's webhook secrets are set here, nothing could be verified: %s", skippedList(skipped))
				}
				return usagef("no identity has app_secret_env (whatsapp) or webhook_secret_env (http): nothing could be verified")
			}
			warnSkipped(a, "webhook", skipped, func(identities.Skipped) string {
				return "its deliveries get 401 here, so its provider retries them"
			})
			if o.clockWarn, err = a.cfg.clockWarn(); err != nil {
				return err
			}
			// As for msgq serve: any store error but an unreachable server
			// ends it at once, before it listens; an unreachable one (nil
			// st) is waited for, answering 503 meanwhile.
			st, err := a.store(cmd.Context())
			if err != nil && !storeopen.ConnectionLost(err) {
				return err
			}
			if err != nil {
				a.log.Warn("webhook: the store is unreachable; answering 503 until it opens", "err", err)
			}
			return runWebhookServe(cmd.Context(), a, st, wc, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ":8080", "address to listen on")
	f.Int64Var(&o.maxBody, "max-body", webhook.DefaultMaxBody, "largest body accepted, in bytes (larger: 413)")
	f.Int64Var(&o.maxPending, "max-pending", webhook.DefaultMaxPending, "bytes of bodies held in memory at once, before and while they are verified and stored (beyond: 503 with Retry-After)")
	f.IntVar(&o.maxConns, "max-conns", httpserve.DefaultMaxConns, "connections open at once (more wait to be accepted)")
	f.DurationVar(&o.tolerance, "tolerance", verify.DefaultTolerance, "how far a Standard Webhooks timestamp may be from now")
	f.BoolVar(&o.process, "process", true, "process stored deliveries in this process (false: leave them to msgq webhook process)")
	f.DurationVar(&o.poll, "poll", time.Second, "how often the worker looks again at parked statuses")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGINT/SIGTERM, how long requests in progress may finish")
	f.StringVar(&o.publicURL, "public-url", "", "the scheme and host providers call (behind a proxy), for signatures over the URL; default: the request's own")
	addClockWarnFlag(cmd)
	return cmd
}

// validPublicURL says s is a scheme and a host, with nothing after them.
func validPublicURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" &&
		(u.Path == "" || u.Path == "/") && u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

// runWebhookServe serves the webhook routes over st, or, with st nil (its
// server unreachable at start), answers 503 with Retry-After until the
// store opens: a provider retries a 503 as it retries a refused
// connection, and /healthz says the store is not reachable yet.
func runWebhookServe(ctx context.Context, a *app, st store.Store, wc webhook.Config, o *webhookServeOptions) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit the collector works to keep under: the bodies
		// the budget admits, the garbage they leave, and the rest of the
		// process. The budget bounds what is live; this bounds the
		// garbage, which GOGC alone would let double the heap.
		debug.SetMemoryLimit(2*o.maxPending + 64<<20)
	}
	ln, err := httpserve.Listen(ctx, o.addr, o.maxConns)
	if err != nil {
		return err
	}
	h := &httpserve.Swap{}
	srv := httpserve.NewServer(h, o.maxConns)

	// The receiver, its clock watch and its worker over an open store:
	// started at once, or by the goroutine that keeps opening the store.
	var (
		mu      sync.Mutex
		rcv     *webhook.Receiver
		stopped bool // serve has shut down: a store opening now starts nothing
		workers sync.WaitGroup
	)
	// Their contexts outlive ctx: the clock and the worker stop after the
	// server has shut down (below), not when the signal comes.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	start := func(st store.Store) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		// The evidence it applies is timed on the store's clock; a host
		// whose clock is off is reported (and its offset recorded for
		// stats). Signature timestamps are checked against the store's
		// clock as measured from here too: a host whose own clock drifted
		// would refuse every signed delivery once past --tolerance.
		clk := newClockWatch(a, st, "webhook serve", "", o.clockWarn, false)
		clk.Start(bg)
		wake := make(chan struct{}, 1)
		wc := wc
		wc.Store, wc.MaxBody, wc.MaxPending, wc.Tolerance, wc.Log, wc.Now = st, o.maxBody, o.maxPending, o.tolerance, a.log, clk.Now
		if o.process {
			wc.Stored = func() {
				select {
				case wake <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
		}
		rcv = webhook.NewReceiver(wc)
		h.Set(rcv.Handler())
		if o.process {
			p := &webhook.Processor{Store: st, PhoneNumberIDs: phoneNumberIDs(a.cfg.Identities),
				TemplateIdentities: templateIdentities(a.cfg.Identities), Log: a.log}
			workers.Go(func() { p.Run(bg, wake, o.poll) })
		}
	}
	if st != nil {
		start(st)
	} else {
		h.Set(httpserve.Unavailable(webhookRetryAfter))
		workers.Go(func() {
			if st, ok := httpserve.OpenWhenReachable(ctx, a.store, storeopen.ConnectionLost, a.log, "webhook"); ok {
				start(st)
				a.log.Info("webhook: the store is open; serving")
			}
		})
	}
	fmt.Fprintf(a.ios.Err, "webhook: listening on http://%s\n", ln.Addr())

	// Each handler waits for its delivery's write: every 200 sent was
	// durable, every delivery cut off got none and its provider retries.
	// What was handed to the committer is still written by rcv.Close.
	serveErr := httpserve.Serve(ctx, srv, ln, o.grace, a.log,
		"webhook: requests still in progress after --grace were cut off; their providers will retry")
	mu.Lock()
	stopped = true
	if rcv != nil {
		rcv.Close()
	}
	mu.Unlock()
	stopBg()
	workers.Wait()
	if serveErr != nil {
		return serveErr
	}
	fmt.Fprintln(a.ios.Err, "webhook: stopped")
	return nil
}

// webhookRetryAfter is what a 503 of a store not open yet asks a provider
// to wait: about the first pause between attempts to open it.
const webhookRetryAfter = 2 * time.Second
