package provider_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

const reqBody = `{"to":"+15550100"}`

// post builds the request every transport test sends.
func post(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// hijackAfterRead returns a server that reads each request whole, counts it,
// and drops the connection without answering: the request got through, the
// answer never comes back.
func hijackAfterRead(t *testing.T, got *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == reqBody {
			got.Add(1)
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDoConnectionDroppedAfterTheRequestIsAmbiguous(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	srv := hijackAfterRead(t, &got)

	resp, _, wrote, err := provider.Do(context.Background(), provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if resp != nil || err == nil {
		t.Fatalf("Do = resp %v, err %v; want no response and an error", resp, err)
	}
	if !wrote {
		t.Errorf("wrote = false after the server read the whole request")
	}
	if got.Load() != 1 {
		t.Errorf("server read %d complete requests, want exactly 1 (a hidden re-send would be a duplicate)", got.Load())
	}
	res := provider.ClassifyTransport(err, wrote)
	if res.Class != retry.Ambiguous {
		t.Errorf("class = %q, want ambiguous", res.Class)
	}
	if res.RawError != err.Error() || res.HTTPStatus != 0 {
		t.Errorf("RawError %q HTTPStatus %d; want the error verbatim and 0", res.RawError, res.HTTPStatus)
	}
}

func TestDoClosedPortIsTransientAndNotWritten(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	resp, _, wrote, err := provider.Do(context.Background(), provider.NoRedirects(nil), post(t, "http://"+addr+"/v1/messages"))
	if resp != nil || err == nil {
		t.Fatalf("Do = resp %v, err %v; want no response and an error", resp, err)
	}
	if wrote {
		t.Errorf("wrote = true for a refused connection")
	}
	res := provider.ClassifyTransport(err, wrote)
	if res.Class != retry.Transient {
		t.Errorf("class = %q, want transient", res.Class)
	}
	if !strings.Contains(res.RawError, "refused") {
		t.Errorf("RawError = %q, want the dial error verbatim", res.RawError)
	}
}

func TestDoDialFailureIsTransient(t *testing.T) {
	t.Parallel()
	dnsErr := &net.DNSError{Err: "no such host", Name: "api.invalid", IsNotFound: true}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, dnsErr },
	}}
	resp, _, wrote, err := provider.Do(context.Background(), provider.NoRedirects(client), post(t, "http://api.invalid/v1/messages"))
	if resp != nil || !errors.Is(err, dnsErr) {
		t.Fatalf("Do = resp %v, err %v; want the DNS error", resp, err)
	}
	if res := provider.ClassifyTransport(err, wrote); wrote || res.Class != retry.Transient {
		t.Errorf("wrote %v class %q; want false, transient", wrote, res.Class)
	}
}

func TestDoTLSHandshakeFailureIsTransient(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the expected handshake error
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// A client that does not trust the test certificate.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}

	resp, _, wrote, err := provider.Do(context.Background(), provider.NoRedirects(client), post(t, srv.URL))
	if resp != nil || err == nil {
		t.Fatalf("Do = resp %v, err %v; want a handshake error", resp, err)
	}
	if res := provider.ClassifyTransport(err, wrote); wrote || res.Class != retry.Transient {
		t.Errorf("wrote %v class %q (err %v); want false, transient", wrote, res.Class, err)
	}
	if hits.Load() != 0 {
		t.Errorf("handler ran %d times; the request should never have been delivered", hits.Load())
	}
}

// sleeper answers only after the client gave up; received is closed when
// the request has been read whole.
func sleeper(t *testing.T) (srv *httptest.Server, received chan struct{}) {
	t.Helper()
	received = make(chan struct{})
	var once atomic.Bool
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if once.CompareAndSwap(false, true) {
			close(received)
		}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	return srv, received
}

func TestDoClientTimeoutAfterTheWriteIsAmbiguous(t *testing.T) {
	t.Parallel()
	srv, _ := sleeper(t)
	client := srv.Client()
	client.Timeout = 100 * time.Millisecond

	resp, _, wrote, err := provider.Do(context.Background(), provider.NoRedirects(client), post(t, srv.URL))
	if resp != nil || err == nil {
		t.Fatalf("Do = resp %v, err %v; want a timeout", resp, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err = %v; want a timeout", err)
	}
	if res := provider.ClassifyTransport(err, wrote); !wrote || res.Class != retry.Ambiguous {
		t.Errorf("wrote %v class %q; want true, ambiguous", wrote, res.Class)
	}
}

func TestDoContextDeadlineAfterTheWriteIsAmbiguous(t *testing.T) {
	t.Parallel()
	srv, _ := sleeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()

	resp, _, wrote, err := provider.Do(ctx, provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if resp != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = resp %v, err %v; want context.DeadlineExceeded", resp, err)
	}
	if res := provider.ClassifyTransport(err, wrote); !wrote || res.Class != retry.Ambiguous {
		t.Errorf("wrote %v class %q; want true, ambiguous", wrote, res.Class)
	}
}

func TestDoShutdownCancelAfterTheWriteIsAmbiguous(t *testing.T) {
	t.Parallel()
	srv, received := sleeper(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-received // the provider has the request: now we shut down
		cancel()
	}()

	resp, _, wrote, err := provider.Do(ctx, provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = resp %v, err %v; want context.Canceled", resp, err)
	}
	if res := provider.ClassifyTransport(err, wrote); !wrote || res.Class != retry.Ambiguous {
		t.Errorf("wrote %v class %q; want true, ambiguous", wrote, res.Class)
	}
}

func TestDoContextCancelledBeforeTheCallIsTransient(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	resp, _, wrote, err := provider.Do(ctx, provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = resp %v, err %v; want context.Canceled", resp, err)
	}
	if res := provider.ClassifyTransport(err, wrote); wrote || res.Class != retry.Transient {
		t.Errorf("wrote %v class %q; want false, transient", wrote, res.Class)
	}
	if hits.Load() != 0 {
		t.Errorf("handler ran %d times for a call cancelled before it started", hits.Load())
	}
}

func TestDoReadsTheBodyAndClosesIt(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"msg_1"}`)
	}))
	t.Cleanup(srv.Close)

	resp, body, wrote, err := provider.Do(context.Background(), provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if err != nil || resp == nil {
		t.Fatalf("Do: %v", err)
	}
	if resp.StatusCode != http.StatusAccepted || string(body) != `{"id":"msg_1"}` || !wrote {
		t.Errorf("status %d body %q wrote %v", resp.StatusCode, body, wrote)
	}
	if resp.Body != http.NoBody {
		t.Errorf("resp.Body was not replaced by http.NoBody")
	}
}

func TestDoBodyCutShortIsAmbiguousWithTheStatus(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messa")
		buf.Flush()
	}))
	t.Cleanup(srv.Close)

	resp, body, _, err := provider.Do(context.Background(), provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if resp == nil || err == nil {
		t.Fatalf("Do = resp %v, err %v; want the status and a body error", resp, err)
	}
	res := provider.ClassifyUnreadBody(resp, body, err)
	if res.Class != retry.Ambiguous || res.HTTPStatus != 200 {
		t.Errorf("class %q status %d; want ambiguous, 200", res.Class, res.HTTPStatus)
	}
	if !strings.HasPrefix(res.RawError, `{"messa`) || !strings.Contains(res.RawError, err.Error()) {
		t.Errorf("RawError = %q; want the partial body then the read error", res.RawError)
	}
}

func TestDoCapsTheBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		bw := bufio.NewWriter(w)
		for range provider.MaxBodyBytes/1024 + 1 {
			bw.WriteString(strings.Repeat("x", 1024))
		}
		bw.Flush()
	}))
	t.Cleanup(srv.Close)

	resp, body, _, err := provider.Do(context.Background(), provider.NoRedirects(srv.Client()), post(t, srv.URL))
	if resp == nil || !errors.Is(err, provider.ErrBodyTooLarge) {
		t.Fatalf("Do = resp %v, err %v; want ErrBodyTooLarge", resp, err)
	}
	if len(body) != provider.MaxBodyBytes {
		t.Errorf("len(body) = %d, want %d", len(body), provider.MaxBodyBytes)
	}
}

func TestNoRedirectsReturnsTheRedirect(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/elsewhere", func(http.ResponseWriter, *http.Request) { followed.Add(1) })
	mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	orig := srv.Client()

	client := provider.NoRedirects(orig)
	resp, _, _, err := provider.Do(context.Background(), client, post(t, srv.URL+"/v1/messages"))
	if err != nil || resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("Do = %v, %v; want the 307 itself", resp, err)
	}
	if followed.Load() != 0 {
		t.Errorf("the redirect was followed %d times", followed.Load())
	}
	if orig.CheckRedirect != nil || client.Transport != orig.Transport {
		t.Errorf("NoRedirects changed the caller's client or dropped its transport")
	}
	if d := provider.NoRedirects(nil); d.Timeout != provider.DefaultTimeout || d.CheckRedirect == nil {
		t.Errorf("NoRedirects(nil) = timeout %v; want %v and no redirects", d.Timeout, provider.DefaultTimeout)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, header string
		want         time.Duration
	}{
		{"seconds are read as seconds", "120", 2 * time.Minute},
		{"an HTTP date is relative to now", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"a date in the past is no delay", now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"a missing header is no delay", "", 0},
		{"garbage is no delay", "soon", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tc.header != "" {
				h.Set("Retry-After", tc.header)
			}
			if got := provider.RetryAfter(h, now); got != tc.want {
				t.Errorf("RetryAfter(%q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

func TestClassifyTransportWithoutAnErrorIsAmbiguous(t *testing.T) {
	t.Parallel()
	if res := provider.ClassifyTransport(nil, false); res.Class != retry.Ambiguous || res.RawError == "" {
		t.Errorf("ClassifyTransport(nil, false) = %+v; want ambiguous with a note", res)
	}
}
