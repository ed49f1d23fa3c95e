// Package webhook receives providers' webhooks and turns them into
// evidence (docs/webhooks.md). The Receiver is the HTTP side: it verifies a
// delivery, stores it raw and durably, and only then answers 200, so a
// provider retries anything msgq did not keep. The Processor reads stored
// deliveries afterwards and writes what they say through the store, so a
// crash between receipt and processing loses nothing.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/msgq/msgq/internal/bodybudget"
	"github.com/msgq/msgq/internal/groupcommit"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/kinds"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// Endpoint paths: a contract providers are configured with. Each kind
// with webhooks is served at /webhooks/<its webhook's name> (these two
// among them) and, per identity, at /webhooks/<kind>/<identity>.
const (
	PathWhatsApp = "/webhooks/whatsapp"
	PathHTTP     = "/webhooks/http"
	PathHealth   = "/healthz"
	PathPrefix   = "/webhooks/"
)

// DefaultMaxBody bounds a delivery. Meta documents batched payloads of up
// to 3 MB; a little more leaves room without inviting abuse.
const DefaultMaxBody = 4 << 20

// DefaultMaxPending bounds the bytes of request bodies the receiver holds
// at once (read, being verified, or waiting for their durable write). Sixteen
// maximal deliveries; far more than providers send at once in practice,
// whose deliveries are a few kilobytes.
const DefaultMaxPending = 64 << 20

// Route is one identity whose webhooks the receiver verifies: its kind and
// a verifier holding its secrets.
type Route struct {
	Identity string
	Kind     *provider.Kind
	Verifier provider.Verifier
}

// Config configures a Receiver.
type Config struct {
	// Store keeps the raw deliveries.
	Store store.Store
	// Routes are the identities whose webhooks are verified here. A
	// format no route speaks answers 404.
	Routes []Route
	// PublicURL is the scheme and host providers call (https://hooks.example.com),
	// for signature schemes that sign the URL; "" takes the request's Host.
	PublicURL string
	// MaxBody bounds a body (0: DefaultMaxBody); larger ones get 413.
	MaxBody int64
	// MaxPending bounds the bytes of bodies held in memory at once, from
	// the first byte read until the delivery is refused or stored
	// (0: DefaultMaxPending). A body that does not fit gets 503 with
	// Retry-After, before it is read.
	MaxPending int64
	// RetryAfter is what a 503 asks the client to wait (0: 5s).
	RetryAfter time.Duration
	// Tolerance is how far a Standard Webhooks timestamp may be from now
	// (0: verify.DefaultTolerance).
	Tolerance time.Duration
	// MaxBatch bounds how many deliveries one durable write takes
	// (0: 512).
	MaxBatch int
	// Stored, when set, is called after each durable write (to wake the
	// processor).
	Stored func()
	Now    func() time.Time
	Log    *slog.Logger
}

// Receiver is the webhook HTTP handler. Create it with NewReceiver, serve
// Handler(), and Close it after the HTTP server has shut down.
type Receiver struct {
	cfg    Config
	budget *bodybudget.Budget
	// busy counts 503s since busyLogged (unix nanoseconds) last logged.
	busy       atomic.Int64
	busyLogged atomic.Int64
	commit     *groupcommit.Committer[store.WebhookEvent, struct{}]
}

// NewReceiver starts the receiver's committer.
func NewReceiver(cfg Config) *Receiver {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 5 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 512
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &Receiver{cfg: cfg, budget: bodybudget.New(cfg.MaxPending)}
	// Every delivery waiting when a write starts goes into it, so one
	// fsync acknowledges many webhooks (internal/groupcommit).
	r.commit = groupcommit.Start(cfg.MaxBatch, 30*time.Second, r.write)
	return r
}

// Close stops the committer. Call it after the server has shut down, so
// that every request still in a handler has had its answer.
func (r *Receiver) Close() {
	r.commit.Close()
}

// Handler serves the endpoints: for each webhook format the routes speak,
// /webhooks/<format> (every identity speaking it is tried in turn), and for
// each route /webhooks/<kind>/<identity> (that identity's secrets alone).
func (r *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	byFormat := map[string][]Route{}
	var formats []string
	for _, rt := range r.cfg.Routes {
		f := rt.Kind.Webhook.Name
		if _, ok := byFormat[f]; !ok {
			formats = append(formats, f)
		}
		byFormat[f] = append(byFormat[f], rt)
		one := []Route{rt}
		path := PathPrefix + rt.Kind.Name + "/" + rt.Identity
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, req *http.Request) { r.handshake(w, req, one) })
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, req *http.Request) { r.receive(w, req, rt.Kind.Webhook, one) })
	}
	// Every known format's path answers, with 404 and a hint when no
	// identity here speaks it.
	hints := map[string]string{}
	for _, k := range kinds.All {
		if wh := k.Webhook; wh != nil {
			if _, ok := hints[wh.Name]; !ok {
				hints[wh.Name] = "no " + wh.Name + " identity has " + wh.SecretKey + " configured"
				if _, ok := byFormat[wh.Name]; !ok {
					formats = append(formats, wh.Name)
				}
			}
		}
	}
	for _, f := range formats {
		routes := byFormat[f]
		mux.HandleFunc("GET "+PathPrefix+f, func(w http.ResponseWriter, req *http.Request) { r.handshake(w, req, routes) })
		mux.HandleFunc("POST "+PathPrefix+f, func(w http.ResponseWriter, req *http.Request) {
			if len(routes) == 0 {
				http.Error(w, hints[f], http.StatusNotFound)
				return
			}
			r.receive(w, req, routes[0].Kind.Webhook, routes)
		})
	}
	mux.HandleFunc("GET "+PathHealth, r.health)
	return mux
}

// write stores one batch of verified deliveries in one transaction.
func (r *Receiver) write(ctx context.Context, evs []store.WebhookEvent) ([]struct{}, error) {
	if err := r.cfg.Store.WebhookStore(ctx, evs); err != nil {
		r.cfg.Log.Error("webhook: storing deliveries failed; answering 500 so the provider retries", "n", len(evs), "err", err)
		return nil, err
	}
	if r.cfg.Stored != nil {
		r.cfg.Stored()
	}
	return make([]struct{}, len(evs)), nil
}

// store hands one delivery to the committer and waits until it is durable.
// Once handed over, it waits for the write even if the provider hangs up:
// the answer is what the provider acts on, but the write happens either
// way.
func (r *Receiver) store(req *http.Request, ev store.WebhookEvent) error {
	_, err := r.commit.Do(req.Context(), ev)
	if errors.Is(err, groupcommit.ErrClosed) {
		return errClosed
	}
	return err
}

// errClosed answers a delivery that came in after the receiver closed: the
// provider gets a 500 and retries.
var errClosed = errors.New("webhook: receiver closed")

// readBody reads at most MaxBody bytes into memory reserved from the
// budget; it answers 413 (too large), 503 (no room now) or 400 itself. The
// caller must call release once the body is no longer held.
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) (body []byte, release func(), ok bool) {
	body, reserved, err := r.budget.Read(http.MaxBytesReader(w, req.Body, r.cfg.MaxBody), req.ContentLength, r.cfg.MaxBody)
	release = func() { r.budget.Give(reserved) }
	if err == nil {
		return body, release, true
	}
	release()
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, bodybudget.ErrTooLarge), errors.As(err, &mbe):
		http.Error(w, fmt.Sprintf("body over %d bytes", r.cfg.MaxBody), http.StatusRequestEntityTooLarge)
	case errors.Is(err, bodybudget.ErrBusy):
		r.logBusy()
		w.Header().Set("Retry-After", strconv.Itoa(int((r.cfg.RetryAfter+time.Second-1)/time.Second)))
		// The body was not read: do not let the client send it on this
		// connection.
		w.Header().Set("Connection", "close")
		http.Error(w, "busy: too many deliveries awaiting verification; retry later", http.StatusServiceUnavailable)
	default:
		http.Error(w, "could not read body", http.StatusBadRequest)
	}
	return nil, nil, false
}

// logBusy logs 503s at most once a second, with how many there were: a
// flood must not turn into a flood of log lines.
func (r *Receiver) logBusy() {
	n := r.busy.Add(1)
	now := time.Now().UnixNano()
	last := r.busyLogged.Load()
	if now-last < int64(time.Second) || !r.busyLogged.CompareAndSwap(last, now) {
		return
	}
	r.busy.Add(-n)
	r.cfg.Log.Warn("webhook: deliveries refused for now (503): too many bytes awaiting verification",
		"refused", n, "max_pending", r.cfg.MaxPending)
}

// handshake answers a subscription handshake (Meta's GET hub.challenge)
// when one of the routes' verifiers accepts it. Every route is asked, so
// the time taken says nothing about which one (or how much of a token)
// matched.
func (r *Receiver) handshake(w http.ResponseWriter, req *http.Request, routes []Route) {
	q := req.URL.Query()
	challenge, ok := "", false
	for _, rt := range routes {
		if h, is := rt.Verifier.(provider.Handshaker); is {
			if c, yes := h.Handshake(q); yes && !ok {
				challenge, ok = c, true
			}
		}
	}
	if !ok {
		r.cfg.Log.Warn("webhook: verification refused", "path", req.URL.Path, "mode", q.Get("hub.mode"))
		http.Error(w, "verification refused", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, challenge)
}

// receive verifies a delivery with the routes' verifiers, the first that
// accepts it naming its identity, checks that it is the format's webhook,
// and keeps it.
func (r *Receiver) receive(w http.ResponseWriter, req *http.Request, wh *provider.Webhook, routes []Route) {
	format := wh.Name
	d := &provider.Delivery{Header: req.Header, Query: req.URL.Query(), URL: r.publicURL(req), Now: r.cfg.Now(), Tolerance: r.cfg.Tolerance}
	if d.Tolerance <= 0 {
		d.Tolerance = verify.DefaultTolerance
	}
	// A request that cannot be signed (no or a malformed signature
	// header, a stale timestamp) is refused before its body is read, so
	// an unsigned flood costs no memory. The check is the format's, the
	// same for every identity.
	if err := routes[0].Verifier.Precheck(d); err != nil {
		r.cfg.Log.Warn("webhook: "+format+" delivery refused", "err", err)
		refuseUnread(w, refusal(wh, err))
		return
	}
	body, release, ok := r.readBody(w, req)
	if !ok {
		return
	}
	defer release()
	d.Body = body
	identity := ""
	var verr error = verify.ErrMissingSignature
	for _, rt := range routes {
		if verr = rt.Verifier.Verify(d); verr == nil {
			identity = rt.Identity
			break
		}
		if !errors.Is(verr, verify.ErrBadSignature) {
			// Missing headers or a stale timestamp fail for every
			// identity alike.
			break
		}
	}
	if verr != nil {
		r.cfg.Log.Warn("webhook: "+format+" delivery refused", "err", verr)
		http.Error(w, refusal(wh, verr), http.StatusUnauthorized)
		return
	}
	hdr := pick(req.Header, wh.Headers...)
	// At the store's resolution, so that the stored received_at and the
	// pseudo-header a KeepsCall parser reads are the same instant.
	received := r.cfg.Now().UTC().Truncate(store.Resolution)
	if wh.KeepsCall {
		hdr[provider.HeaderURL] = d.URL
		hdr[provider.HeaderReceivedAt] = received.Format(time.RFC3339Nano)
	}
	b, err := wh.Parse(body, hdr)
	if err != nil {
		r.cfg.Log.Warn("webhook: "+format+" body refused", "err", err)
		http.Error(w, oneLine(err.Error()), http.StatusBadRequest)
		return
	}
	// The dedupe key makes a copy of a delivery this identity has stored
	// (the provider's retry, or a signed body captured and replayed: a
	// WhatsApp or Twilio signature carries no time, so it never goes
	// stale) cost its key, not its body: the store keeps the first copy
	// and counts the others, and each is answered 200.
	r.keep(w, req, store.WebhookEvent{Provider: format, Identity: identity, Body: body, Headers: hdr, ReceivedAt: received,
		DedupeKey: wh.DedupeKey(body, hdr), Items: len(b.Statuses) + len(b.Inbound) + len(b.Notices)})
}

// refusal is a 401's text: why, when the format tells the sender
// (Webhook.TellWhy).
func refusal(wh *provider.Webhook, err error) string {
	if !wh.TellWhy {
		return "signature refused"
	}
	return "signature refused: " + err.Error()
}

// publicURL is the URL the provider called, as it signed it: the
// configured public base (TLS is often ended by a proxy in front) or the
// request's own host, and the request's path and query.
func (r *Receiver) publicURL(req *http.Request) string {
	base := strings.TrimRight(r.cfg.PublicURL, "/")
	if base == "" {
		scheme := "http"
		if req.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + req.Host
	}
	return base + req.URL.RequestURI()
}

// keep stores a verified delivery and answers: 200 only once it is
// durable (or a copy of it is: a replay), 500 (the provider retries) when
// it is not.
func (r *Receiver) keep(w http.ResponseWriter, req *http.Request, ev store.WebhookEvent) {
	if ev.ReceivedAt.IsZero() {
		ev.ReceivedAt = r.cfg.Now()
	}
	if err := r.store(req, ev); err != nil {
		http.Error(w, "could not store the delivery; retry", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *Receiver) health(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
	defer cancel()
	if _, err := r.cfg.Store.WebhookPending(ctx, 1); err != nil {
		r.cfg.Log.Error("webhook: health check: store unreachable", "err", err)
		http.Error(w, "store unreachable", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// refuseUnread answers 401 to a request whose body was not read, and
// closes the connection rather than read the body to reuse it.
func refuseUnread(w http.ResponseWriter, msg string) {
	w.Header().Set("Connection", "close")
	http.Error(w, msg, http.StatusUnauthorized)
}

// pick keeps the named headers, by lower-case name.
func pick(h http.Header, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if v := h.Get(n); v != "" {
			out[strings.ToLower(n)] = v
		}
	}
	return out
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
