package httpserve_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/httpserve"
)

// A server answers 503 with Retry-After until its handler is swapped in,
// then through the new one, and stops when its context ends.
func TestAServerAnswers503UntilSwappedAndStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := httpserve.Listen(ctx, "127.0.0.1:0", 8)
	if err != nil {
		t.Fatal(err)
	}
	h := &httpserve.Swap{}
	h.Set(httpserve.Unavailable(1500 * time.Millisecond))
	srv := httpserve.NewServer(h, 8)
	done := make(chan error, 1)
	go func() { done <- httpserve.Serve(ctx, srv, ln, time.Second, slog.New(slog.DiscardHandler), "cut off") }()
	url := "http://" + ln.Addr().String() + "/"

	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("before the swap: %d, Retry-After %q; want 503 and 2 (seconds, rounded up)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	h.Set(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	resp, err = http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("after the swap: %d %q", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("a stop returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop with its context")
	}
}

// Opening retries while the store is unreachable and gives up on any
// other error.
func TestOpenWhenReachableRetriesOnlyWhileUnreachable(t *testing.T) {
	lost := errors.New("connection refused")
	tries := 0
	open := func(context.Context) (string, error) {
		tries++
		if tries == 1 {
			return "", lost
		}
		return "store", nil
	}
	isLost := func(err error) bool { return errors.Is(err, lost) }
	log := slog.New(slog.DiscardHandler)
	if st, ok := httpserve.OpenWhenReachable(context.Background(), open, isLost, log, "serve"); !ok || st != "store" || tries != 2 {
		t.Errorf("opened %q %v after %d tries; want the store after 2", st, ok, tries)
	}
	bad := func(context.Context) (string, error) { return "", errors.New("password authentication failed") }
	if _, ok := httpserve.OpenWhenReachable(context.Background(), bad, isLost, log, "serve"); ok {
		t.Errorf("a refused password was retried into an open store")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := httpserve.OpenWhenReachable(ctx, open, isLost, log, "serve"); ok {
		t.Errorf("opened after the context ended")
	}
}
