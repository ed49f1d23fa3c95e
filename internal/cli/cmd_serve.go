package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/api"
	"github.com/msgq/msgq/internal/bodybudget"
	"github.com/msgq/msgq/internal/events"
	"github.com/msgq/msgq/internal/httpserve"
	"github.com/msgq/msgq/internal/queue"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

type serveOptions struct {
	addr            string
	tlsCert, tlsKey string
	maxBody         int64
	maxBatchBody    int64
	maxPending      int64
	rate            float64
	burst           int
	keyCache        time.Duration
	maxItems        int
	maxConns        int
	grace           time.Duration
	// events runs a status-event dispatcher in the server (docs/events.md).
	events bool
	// cpuProfile is a hidden flag for profiling serve under load
	// (bench/README.md): the CPU profile is written there on stop.
	cpuProfile string
}

func (o *serveOptions) Validate() error {
	switch {
	case o.addr == "":
		return usagef("--addr is required, e.g. :8080")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usagef("give --tls-cert and --tls-key together")
	case o.maxBody <= 0 || o.maxBatchBody <= 0 || o.maxPending <= 0:
		return usagef("--max-body, --max-batch-body and --max-pending must be positive")
	case bodybudget.LargestBody(o.maxPending) < max(o.maxBody, o.maxBatchBody):
		return usagef("--max-pending (%d) admits bodies of at most %d bytes (an eighth is kept for bodies of 64 KiB or less): raise it to at least 8/7 of --max-body (%d) and --max-batch-body (%d), or no body of the largest size could ever be read",
			o.maxPending, bodybudget.LargestBody(o.maxPending), o.maxBody, o.maxBatchBody)
	case o.rate <= 0 || o.burst <= 0:
		return usagef("--rate and --burst must be positive")
	case o.keyCache < 0:
		return usagef("--key-cache must not be negative")
	case o.maxItems <= 0 || o.maxConns <= 0 || o.grace <= 0:
		return usagef("--max-batch, --max-conns and --grace must be positive")
	}
	return nil
}

func newServeCmd(a *app) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API: idempotent sends and message status for applications",
		Long: `Serve msgq's HTTP API (docs/api.md; the contract is the OpenAPI 3.1 document at
/v1/openapi.json, also docs/openapi.json):

  POST /v1/messages          one send; the Idempotency-Key header is its key
  POST /v1/messages/batch    many sends, each with its own "key" (a result each)
  GET  /v1/messages/{id}     a message as msgq show -o json prints it
  GET  /v1/messages?key=K    the same, by its key
  GET  /v1/openapi.json      the contract

Every request but the last needs Authorization: Bearer KEY, a key made with
msgq api-keys create; the key's tenant is the request's. A send is validated as
msgq send --file validates a line. 202: the message was written and is durable;
200 with Idempotent-Replayed: true: the key was sent with the same body before
(nothing written); 409: the key holds another body; 422: invalid (nothing
written). Concurrent sends are written together, one transaction for many.

Each key may make --rate requests a second (bursts of --burst); beyond: 429
with Retry-After. A send's body over --max-body (a batch's over --max-batch-body)
is 413, refused unread when its Content-Length says so. Bodies held in memory
at once (read, parsed, or waiting for their write) are capped at --max-pending
bytes: a request whose body does not fit is answered 503 (code busy) with
Retry-After, unread, and its client retries with the same key. An eighth of
--max-pending is kept for bodies of 64 KiB or less, so a flood of large bodies
does not crowd out ordinary sends. The process's Go memory limit is set to four
times --max-pending plus 32 MiB unless GOMEMLIMIT is set (a body is held about
three times over while it is parsed and written). While the store is unreachable
the answer is 503 with Retry-After: retrying with the same key is safe. That
holds at start too: a PostgreSQL store that cannot be reached does not stop
serve, which listens, answers 503 and opens the store as soon as it can (any
other store error, such as a schema to migrate, ends serve at once). A key's
look-up is cached for --key-cache, so a revoked key is refused at most that
long after msgq api-keys revoke. SIGINT/SIGTERM stop accepting, let requests
in progress finish (at most --grace), and exit 0.

Unless --events=false, serve also delivers the status events of tenants with
an endpoint (msgq endpoints add), as msgq endpoints deliver --follow does with
its defaults; both, and many serve processes, can run at once (each claims
with a lease).

` + exitStatusHelp,
		Example: `  msgq serve --addr :8080
  msgq serve --addr :8443 --tls-cert cert.pem --tls-key key.pem`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			var tlsCfg *tls.Config
			if o.tlsCert != "" {
				cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
				if err != nil {
					return usagef("--tls-cert/--tls-key: %v", err)
				}
				tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			}
			if o.cpuProfile != "" {
				f, err := os.Create(o.cpuProfile)
				if err != nil {
					return usagef("--cpuprofile: %v", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return usagef("--cpuprofile: %v", err)
				}
				defer pprof.StopCPUProfile()
			}
			// The collector at GOGC=400 rather than 100 unless the operator set
			// GOGC: a serve's live heap is small (tens of MB) and short-lived
			// garbage per request is most of what it allocates, so collecting
			// a quarter as often bought about a fifth more sends a second at 64
			// connections on SQLite (bench/README.md) for about 30 MB more RSS.
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(400)
			}
			if os.Getenv("GOMEMLIMIT") == "" {
				// A soft limit the collector works to keep under, which
				// GOGC=400 alone would let grow to five times the live
				// heap. What is live under a flood of large bodies is
				// about three times what --max-pending admits (the body,
				// the decoder's copy of it and the parsed text, then the
				// stored payload and the answer) and the rest of the
				// process. With the defaults (64 MiB), 300 sends of 1 MiB
				// at once kept serve on SQLite at 130 to 135 MiB of RSS, of
				// which about 60 MiB is not Go's heap (the binary, SQLite's
				// page cache): serve_budget_test.go checks it stays under
				// 160 MiB.
				debug.SetMemoryLimit(4*o.maxPending + 32<<20)
			}
			return runServe(cmd.Context(), a, tlsCfg, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ":8080", "address to listen on")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain), with --tls-key")
	f.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	f.Int64Var(&o.maxBody, "max-body", api.DefaultMaxBody, "largest body of one send (POST /v1/messages), in bytes (larger: 413)")
	f.Int64Var(&o.maxBatchBody, "max-batch-body", api.DefaultMaxBatchBody, "largest body of a batch (POST /v1/messages/batch), in bytes (larger: 413)")
	f.Int64Var(&o.maxPending, "max-pending", api.DefaultMaxPending, "bytes of request bodies held in memory at once, until each is answered (beyond: 503 with Retry-After)")
	f.Float64Var(&o.rate, "rate", api.DefaultRate, "requests a second each API key may make (beyond: 429 with Retry-After)")
	f.IntVar(&o.burst, "burst", api.DefaultBurst, "requests an API key may make at once above --rate")
	f.DurationVar(&o.keyCache, "key-cache", api.DefaultKeyCache, "how long a key's look-up is trusted: a revoke takes effect within it (0: every request reads the store)")
	f.IntVar(&o.maxItems, "max-batch", api.DefaultMaxItems, "most messages in one POST /v1/messages/batch")
	f.IntVar(&o.maxConns, "max-conns", httpserve.DefaultMaxConns, "connections open at once (more wait to be accepted)")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGINT/SIGTERM, how long requests in progress may finish")
	f.BoolVar(&o.events, "events", true, "deliver status events to the tenants' endpoints while serving (as msgq endpoints deliver --follow)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile to this file until serve stops (for bench/api)")
	_ = f.MarkHidden("cpuprofile")
	return cmd
}

func runServe(ctx context.Context, a *app, tlsCfg *tls.Config, o *serveOptions) error {
	// A store that cannot be opened for any reason but an unreachable
	// server (a schema to migrate, a refused password, a bad URL) ends
	// serve at once, with its exit status, before it listens.
	st, err := a.store(ctx)
	if err != nil && !storeopen.ConnectionLost(err) {
		return err
	}
	ln, lerr := httpserve.Listen(ctx, o.addr, o.maxConns)
	if lerr != nil {
		return lerr
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	h := &httpserve.Swap{}
	srv := httpserve.NewServer(h, o.maxConns)

	// The API over an open store, and its event dispatcher; started at once,
	// or (store unreachable) by the goroutine that keeps opening it.
	var (
		mu      sync.Mutex
		srvAPI  *api.Server
		stopped bool // serve has shut down: a store opening now starts nothing
		running sync.WaitGroup
	)
	start := func(st store.Store) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		srvAPI = api.New(api.Config{
			Store: st, Parse: api.NewSendParser(queue.Defaults{Identity: a.cfg.DefaultIdentity, Region: a.cfg.Region, Identities: a.cfg.Identities}, a.now),
			Show:    func(ctx context.Context, st store.Store, m *store.Message) (any, error) { return showOf(ctx, st, m) },
			MaxBody: o.maxBody, MaxBatchBody: o.maxBatchBody, MaxPending: o.maxPending, Rate: o.rate, Burst: o.burst, KeyCache: o.keyCache, MaxItems: o.maxItems,
			Log: a.log, ConnectionLost: storeopen.ConnectionLost,
		})
		h.Set(srvAPI.Handler())
		if o.events {
			running.Go(func() { dispatchEvents(ctx, a, st) })
		}
		// Rows an application's enqueue() took in are admitted here too,
		// so a queue served by msgq serve needs no drain to check them.
		running.Go(func() { followIntake(ctx, a, st, "serve") })
	}
	if err == nil {
		start(st)
	} else {
		// Unreachable at start (PostgreSQL down, or not up yet): serve
		// anyway, answering 503 with Retry-After as a store lost mid-run
		// is answered, and open the store as soon as it can be.
		a.log.Warn("serve: the store is unreachable; answering 503 until it opens", "err", err)
		h.Set(api.Unavailable(api.DefaultRetryAfter))
		running.Go(func() {
			if st, ok := httpserve.OpenWhenReachable(ctx, a.store, storeopen.ConnectionLost, a.log, "serve"); ok {
				start(st)
				a.log.Info("serve: the store is open; serving")
			}
		})
	}
	fmt.Fprintf(a.ios.Err, "serve: listening on %s://%s\n", scheme, ln.Addr())

	// Each handler waits for its send's write: every 202 sent was durable;
	// a request cut off got no answer, and its client retries with its key.
	serveErr := httpserve.Serve(ctx, srv, ln, o.grace, a.log,
		"serve: requests still in progress after --grace were cut off; their clients retry with their keys")
	mu.Lock()
	stopped = true
	if srvAPI != nil {
		srvAPI.Close()
	}
	mu.Unlock()
	// The dispatcher saw ctx end too (or serve failed, and ctx ends with
	// the process): its deliveries in flight finish and are recorded.
	if serveErr != nil {
		return serveErr
	}
	running.Wait()
	fmt.Fprintln(a.ios.Err, "serve: stopped")
	return nil
}

// dispatchEvents delivers status events until ctx ends. A store error
// ends one run of the dispatcher, not the server: it starts again after a
// pause, and its leases keep any event from going out twice at once.
func dispatchEvents(ctx context.Context, a *app, st store.Store) {
	owner := leaseOwner()
	for pause := time.Second; ctx.Err() == nil; pause = min(pause*2, time.Minute) {
		d := &events.Dispatcher{Store: st, Owner: owner, Follow: true, Log: a.log}
		_, err := d.Run(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		a.log.Warn("serve: status events: the dispatcher stopped; starting again", "err", storeopen.RedactErr(a.cfg.Store, err), "in", pause)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}
