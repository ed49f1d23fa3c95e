package provider

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/msgq/msgq/internal/retry"
)

// Shared plumbing for providers that speak HTTP.
//
// The one question every failed call must answer is "could the provider
// have acted on this request?". Do answers it with the wrote flag and
// ClassifyTransport turns the answer into a class: a request that provably
// never left us is Transient (safe to send again), anything else that got
// no answer is Ambiguous (it may be on the customer's phone).

// MaxBodyBytes is the most of a response body Do reads. Provider answers are
// a few hundred bytes; anything larger is not an answer we can trust.
const MaxBodyBytes = 1 << 20

// DefaultTimeout bounds one provider call when the caller supplies no
// http.Client. The call also honours its context's deadline.
const DefaultTimeout = 30 * time.Second

// ErrBodyTooLarge is the error Do returns, with the first MaxBodyBytes of
// the body, when a response body is larger than MaxBodyBytes.
var ErrBodyTooLarge = fmt.Errorf("response body larger than %d bytes", MaxBodyBytes)

// Do sends req with client under ctx (which replaces req's context) and
// reads the whole response body, up to MaxBodyBytes, closing it.
//
// wrote reports whether the request may have reached the server. It is
// false only when no connection was ever handed to the request: a refused
// dial, a DNS failure, a TLS handshake failure, or a context that ended
// before a connection was ready. Those failures prove the server saw
// nothing. It is true as soon as the transport hands the request a
// connection (httptrace GotConn) or reports the request written
// (WroteRequest, successful or not). Counting from GotConn rather than only
// from a successful WroteRequest is deliberate: HTTP/2 writes the request on
// another goroutine and may return a cancelled call before reporting the
// write, and a write that failed part-way cannot prove how much the server
// read. A false "not written" would retry a send the provider may have
// processed; a false "written" only costs an operator a look.
//
// The answer is only as good as client's transport: it must be net/http's
// (or one that calls httptrace hooks). A RoundTripper that fails without
// calling them makes every failure look unwritten.
//
// Do follows client's redirect policy; providers should pass a client from
// NoRedirects so that a POST is never silently re-sent or turned into a GET.
//
// Results:
//   - resp == nil: no response arrived; err is the transport error and
//     wrote says whether the request may have been written.
//   - resp != nil, err == nil: body is the complete body (resp.Body is
//     already closed and replaced by http.NoBody).
//   - resp != nil, err != nil: the status and headers arrived but the body
//     could not be read whole (a reset, a timeout, or ErrBodyTooLarge);
//     body holds what was read.
func Do(ctx context.Context, client *http.Client, req *http.Request) (resp *http.Response, body []byte, wrote bool, err error) {
	if client == nil {
		client = NoRedirects(nil)
	}
	var maybeWritten atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { maybeWritten.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { maybeWritten.Store(true) },
	}
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	resp, err = client.Do(req)
	if err != nil {
		if resp != nil && resp.Body != nil {
			// Only CheckRedirect errors return both; we never follow those.
			resp.Body.Close()
		}
		return nil, nil, maybeWritten.Load(), err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	resp.Body = http.NoBody
	if err == nil && len(body) > MaxBodyBytes {
		body, err = body[:MaxBodyBytes], ErrBodyTooLarge
	}
	return resp, body, true, err
}

// ClassifyTransport classifies a call that got no response at all: err and
// wrote as Do returned them. A request that was never written is Transient;
// one that may have been written (a timeout, a reset or EOF after the write,
// our own context cancelled or past its deadline after the write, shutdown
// included) is Ambiguous. That holds for idempotent providers too: the retry
// table, not the provider, turns Ambiguous into a same-key retry when
// Provider.Idempotent() says the provider deduplicates (retry.Outcome).
//
// RawError is err's text verbatim. HTTPStatus is 0. A nil err (which
// net/http never returns without a response) is Ambiguous: nothing proves
// the request stayed here.
func ClassifyTransport(err error, wrote bool) Result {
	raw := "msgq: the call failed without an error"
	if err != nil {
		raw = err.Error()
	}
	if !wrote && err != nil {
		return Result{Class: retry.Transient, RawError: raw}
	}
	return Result{Class: retry.Ambiguous, RawError: raw}
}

// ClassifyUnreadBody classifies a response whose status arrived but whose
// body could not be read whole (Do returned resp and err both non-nil). The
// server answered, so it saw the request, and without the body we cannot
// tell what it did with it: Ambiguous. RawError is what was read, then the
// read error.
func ClassifyUnreadBody(resp *http.Response, body []byte, err error) Result {
	raw := string(body)
	if err != nil {
		if raw != "" {
			raw += "\n"
		}
		raw += "[msgq: reading the response body: " + err.Error() + "]"
	}
	return Result{Class: retry.Ambiguous, HTTPStatus: resp.StatusCode, RawError: raw}
}

// RetryAfter returns the response's Retry-After delay (delta-seconds or an
// HTTP date relative to now) via retry.ParseRetryAfter, or 0 when it has
// none or it cannot be read.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	d, ok := retry.ParseRetryAfter(h.Get("Retry-After"), now)
	if !ok {
		return 0
	}
	return d
}

// sharedTransport is the default clients' connection pool. A drain keeps
// dozens of calls in flight to one host; http.DefaultTransport keeps only two
// idle connections per host, so every other call would open (and leave in
// TIME_WAIT) a new connection, running out of local ports at a few hundred
// calls a second.
var sharedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	return t
}()

// NoRedirects returns a copy of c (nil: a client with DefaultTimeout over a
// pool sized for many calls in flight) that never follows redirects: a 3xx comes back as
// the response. Following one would re-send a POST (307/308) or turn it into
// a GET whose answer we would misread as the send's (301/302/303).
func NoRedirects(c *http.Client) *http.Client {
	var cp http.Client
	if c != nil {
		cp = *c
	} else {
		cp.Timeout = DefaultTimeout
		cp.Transport = sharedTransport
	}
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// IsSuccess reports whether status is 2xx.
func IsSuccess(status int) bool { return status >= 200 && status <= 299 }
