// Package httpserve is what msgq's HTTP servers (msgq serve, webhook
// serve) share around their handlers: a listener that holds a bounded
// number of connections, a server with timeouts and keep-alives that give
// way near that bound, a handler swapped in once the store opens (503s
// until then), and a stop that lets every handler finish its durable
// write within a grace period.
package httpserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
)

// Listen listens on addr, accepting at most maxConns connections at once
// (more wait to be accepted).
func Listen(ctx context.Context, addr string, maxConns int) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, maxConns), nil
}

// NewServer is a server for h on a listener of maxConns: bodies are
// bounded by their handlers, a minute reads the largest over a slow link
// and stops a client that trickles forever, and keep-alives give way near
// the bound (KeepAliveGovernor).
func NewServer(h http.Handler, maxConns int) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	srv.ConnState = KeepAliveGovernor(srv, maxConns)
	return srv
}

// Serve serves srv on ln until ctx ends or serving fails, then
// shuts it down within grace. Shutdown waits for the handlers, each of
// which waits for its own write, so every answer sent was durable.
// Requests still running after grace are cut off unanswered; cutOff is the
// warning that says so (and who retries). It returns serving's own
// failure, nil for a stop.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, log *slog.Logger, cutOff string) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn(cutOff, "err", err)
		srv.Close()
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		return nil
	}
	return serveErr
}

// The pauses between attempts to open a store unreachable at start.
const (
	RetryFirst = time.Second
	RetryMax   = 30 * time.Second
)

// OpenWhenReachable opens the store (open), retrying with a doubling pause
// while its server cannot be reached (lost says an error is that), until
// ctx ends (ok false) or another error comes, which is logged and ends the
// retries: the server (role: serve or webhook) then answers 503 until it
// is stopped, and the log says why.
func OpenWhenReachable[S any](ctx context.Context, open func(context.Context) (S, error), lost func(error) bool, log *slog.Logger, role string) (S, bool) {
	var none S
	for pause := RetryFirst; ; pause = min(pause*2, RetryMax) {
		select {
		case <-ctx.Done():
			return none, false
		case <-time.After(pause):
		}
		st, err := open(ctx)
		switch {
		case err == nil:
			return st, true
		case ctx.Err() != nil:
			return none, false
		case !lost(err):
			log.Error(role+": the store cannot be opened; answering 503 until stopped", "err", err)
			return none, false
		}
		log.Warn(role+": the store is still unreachable", "err", err, "next_try_in", min(pause*2, RetryMax).String())
	}
}

// Swap serves through the handler set last: the 503s of a store
// not open yet, then the API (or the webhook receiver).
type Swap struct{ h atomic.Pointer[http.Handler] }

// Set makes h the handler of every request from now on.
func (s *Swap) Set(h http.Handler) { s.h.Store(&h) }

func (s *Swap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// Unavailable answers every request 503 with Retry-After: the store
// is not open yet.
func Unavailable(retryAfter time.Duration) http.Handler {
	secs := strconv.Itoa(int((retryAfter + time.Second - 1) / time.Second))
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", secs)
		http.Error(w, "the store is not reachable yet; retry later", http.StatusServiceUnavailable)
	})
}

// DefaultMaxConns bounds a server's open connections: well above what
// providers open (Meta sends from a few dozen connections), well below a
// process's usual file limit of 1024.
const DefaultMaxConns = 512

// KeepAliveGovernor returns a ConnState hook that turns keep-alives off
// while the open connections are near the cap, and on again once they are
// well below it. Without it, idle keep-alive connections (a client that
// opened many and went quiet, or an attacker) would hold every slot of the
// LimitListener for IdleTimeout while new deliveries wait to be accepted.
// SetKeepAlivesEnabled(false) also closes the idle ones at once.
func KeepAliveGovernor(srv *http.Server, maxConns int) func(net.Conn, http.ConnState) {
	var (
		mu   sync.Mutex
		open int
		off  bool
	)
	high, low := maxConns*9/10, maxConns/2
	return func(_ net.Conn, cs http.ConnState) {
		mu.Lock()
		switch cs {
		case http.StateNew:
			open++
		case http.StateClosed, http.StateHijacked:
			open--
		}
		turn := 0
		switch {
		case !off && open >= high:
			off, turn = true, -1
		case off && open <= low:
			off, turn = false, 1
		}
		mu.Unlock()
		// Outside mu: closing idle connections takes the server's lock,
		// and their StateClosed calls come back here (from their own
		// goroutines).
		if turn != 0 {
			srv.SetKeepAlivesEnabled(turn > 0)
		}
	}
}
