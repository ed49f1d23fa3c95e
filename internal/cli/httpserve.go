package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// serveUntilDone serves srv on ln until ctx ends or serving fails, then
// shuts it down within grace. Shutdown waits for the handlers, each of
// which waits for its own write, so every answer sent was durable.
// Requests still running after grace are cut off unanswered; cutOff is the
// warning that says so (and who retries). It returns serving's own
// failure, nil for a stop.
func serveUntilDone(ctx context.Context, a *app, srv *http.Server, ln net.Listener, grace time.Duration, cutOff string) error {
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
		a.log.Warn(cutOff, "err", err)
		srv.Close()
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		return nil
	}
	return serveErr
}
