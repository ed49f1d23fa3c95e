// Package webhook receives providers' webhooks and turns them into
// evidence (docs/webhooks.md). The Receiver is the HTTP side: it verifies a
// delivery, stores it raw and durably, and only then answers 200, so a
// provider retries anything msgq did not keep. The Processor reads stored
// deliveries afterwards and writes what they say through the store, so a
// crash between receipt and processing loses nothing.
package webhook

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// Endpoint paths: a contract providers are configured with.
const (
	PathWhatsApp = "/webhooks/whatsapp"
	PathHTTP     = "/webhooks/http"
	PathHealth   = "/healthz"
)

// DefaultMaxBody bounds a delivery. Meta documents batched payloads of up
// to 3 MB; a little more leaves room without inviting abuse.
const DefaultMaxBody = 4 << 20

// AppSecret is one WhatsApp identity's app secret.
type AppSecret struct {
	Identity string
	Secret   []byte
}

// HTTPSecrets are one http identity's Standard Webhooks secrets (several
// during a rotation).
type HTTPSecrets struct {
	Identity string
	Secrets  []verify.Secret
}

// Config configures a Receiver.
type Config struct {
	// Store keeps the raw deliveries.
	Store store.Store
	// WhatsApp app secrets and verify tokens; with none, the WhatsApp
	// endpoint answers 404.
	WhatsApp     []AppSecret
	VerifyTokens []string
	// HTTP secrets; with none, the http endpoint answers 404.
	HTTP []HTTPSecrets
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
	budget *budget
	// busy counts 503s since busyLogged (unix nanoseconds) last logged.
	busy       atomic.Int64
	busyLogged atomic.Int64
	in         chan *delivery
	done       chan struct{}
	stop       context.CancelFunc
}

// delivery is one verified body waiting for the group commit.
type delivery struct {
	ev  store.WebhookEvent
	res chan error
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
	ctx, cancel := context.WithCancel(context.Background())
	r := &Receiver{cfg: cfg, budget: newBudget(cfg.MaxPending), in: make(chan *delivery, cfg.MaxBatch), done: make(chan struct{}), stop: cancel}
	go r.commitLoop(ctx)
	return r
}

// Close stops the committer. Call it after the server has shut down, so
// that every request still in a handler has had its answer.
func (r *Receiver) Close() {
	r.stop()
	<-r.done
}

// Handler serves the endpoints.
func (r *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathWhatsApp, r.whatsAppVerify)
	mux.HandleFunc("POST "+PathWhatsApp, r.whatsApp)
	mux.HandleFunc("POST "+PathHTTP, r.http)
	mux.HandleFunc("GET "+PathHealth, r.health)
	return mux
}

// commitLoop is the group commit: every delivery waiting when a write
// starts goes into it, so one fsync acknowledges many webhooks. Under load
// batches grow by themselves; alone, a delivery is written at once.
func (r *Receiver) commitLoop(ctx context.Context) {
	defer close(r.done)
	batch := make([]*delivery, 0, r.cfg.MaxBatch)
	evs := make([]store.WebhookEvent, 0, r.cfg.MaxBatch)
	for {
		batch, evs = batch[:0], evs[:0]
		select {
		case <-ctx.Done():
			// Handlers still waiting (a shutdown whose grace ran out) were
			// handed over verified deliveries: write them and answer,
			// rather than leave them waiting for ever.
			select {
			case d := <-r.in:
				batch = append(batch, d)
			default:
				return
			}
		case d := <-r.in:
			batch = append(batch, d)
		}
	more:
		for len(batch) < r.cfg.MaxBatch {
			select {
			case d := <-r.in:
				batch = append(batch, d)
			default:
				break more
			}
		}
		for _, d := range batch {
			evs = append(evs, d.ev)
		}
		// Not the request's context: a provider that hangs up must not
		// abort a write that carries other providers' deliveries.
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.cfg.Store.WebhookStore(wctx, evs)
		cancel()
		if err != nil {
			r.cfg.Log.Error("webhook: storing deliveries failed; answering 500 so the provider retries", "n", len(batch), "err", err)
		}
		for _, d := range batch {
			d.res <- err
		}
		if err == nil && r.cfg.Stored != nil {
			r.cfg.Stored()
		}
	}
}

// store hands one delivery to the committer and waits until it is durable.
func (r *Receiver) store(req *http.Request, ev store.WebhookEvent) error {
	d := &delivery{ev: ev, res: make(chan error, 1)}
	select {
	case r.in <- d:
	case <-req.Context().Done():
		return req.Context().Err()
	case <-r.done:
		return errClosed
	}
	// Once handed over, wait for the write even if the provider hangs up:
	// the answer is what the provider acts on, but the write happens
	// either way. A committer that has stopped may have written it last
	// thing, or not at all.
	select {
	case err := <-d.res:
		return err
	case <-r.done:
		select {
		case err := <-d.res:
			return err
		default:
			return errClosed
		}
	}
}

// errClosed answers a delivery that came in after the receiver closed: the
// provider gets a 500 and retries.
var errClosed = errors.New("webhook: receiver closed")

// readBody reads at most MaxBody bytes into memory reserved from the
// budget; it answers 413 (too large), 503 (no room now) or 400 itself. The
// caller must call release once the body is no longer held.
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) (body []byte, release func(), ok bool) {
	body, reserved, err := readLimited(http.MaxBytesReader(w, req.Body, r.cfg.MaxBody), req.ContentLength, r.cfg.MaxBody, r.budget)
	release = func() { r.budget.give(reserved) }
	if err == nil {
		return body, release, true
	}
	release()
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errTooLarge), errors.As(err, &mbe):
		http.Error(w, fmt.Sprintf("body over %d bytes", r.cfg.MaxBody), http.StatusRequestEntityTooLarge)
	case errors.Is(err, errBusy):
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

func (r *Receiver) whatsAppVerify(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	token := q.Get("hub.verify_token")
	ok := false
	for _, t := range r.cfg.VerifyTokens {
		// Every token is compared, so the time taken says nothing about
		// which one (or how much of one) matched.
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			ok = true
		}
	}
	if q.Get("hub.mode") != "subscribe" || token == "" || !ok {
		r.cfg.Log.Warn("webhook: whatsapp verification refused", "mode", q.Get("hub.mode"))
		http.Error(w, "verification refused", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, q.Get("hub.challenge"))
}

func (r *Receiver) whatsApp(w http.ResponseWriter, req *http.Request) {
	if len(r.cfg.WhatsApp) == 0 {
		http.Error(w, "no whatsapp identity has app_secret_env configured", http.StatusNotFound)
		return
	}
	sig := req.Header.Get("X-Hub-Signature-256")
	// A request that cannot be signed is refused before its body is read,
	// so an unsigned flood costs no memory.
	if err := verify.WhatsAppHeader(sig); err != nil {
		r.cfg.Log.Warn("webhook: whatsapp delivery refused", "err", err)
		refuseUnread(w, "signature refused")
		return
	}
	body, release, ok := r.readBody(w, req)
	if !ok {
		return
	}
	defer release()
	identity := ""
	var verr error = verify.ErrMissingSignature
	for _, s := range r.cfg.WhatsApp {
		if verr = verify.WhatsApp(body, sig, s.Secret); verr == nil {
			identity = s.Identity
			break
		}
	}
	if verr != nil {
		r.cfg.Log.Warn("webhook: whatsapp delivery refused", "err", verr)
		http.Error(w, "signature refused", http.StatusUnauthorized)
		return
	}
	if _, err := payload.WhatsApp(body); err != nil {
		r.cfg.Log.Warn("webhook: whatsapp body refused", "err", err)
		http.Error(w, oneLine(err.Error()), http.StatusBadRequest)
		return
	}
	r.keep(w, req, store.WebhookEvent{
		Provider: store.WebhookWhatsApp, Identity: identity, Body: body,
		Headers: pick(req.Header, "X-Hub-Signature-256", "Content-Type", "User-Agent"),
	})
}

func (r *Receiver) http(w http.ResponseWriter, req *http.Request) {
	if len(r.cfg.HTTP) == 0 {
		http.Error(w, "no http identity has webhook_secret_env configured", http.StatusNotFound)
		return
	}
	id, ts, sig := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature")
	// Missing headers or a stale timestamp are refused before the body is
	// read, whatever the body (see verify.Headers).
	if err := verify.Headers(id, ts, sig, r.cfg.Now(), r.cfg.Tolerance); err != nil {
		r.cfg.Log.Warn("webhook: http delivery refused", "err", err)
		refuseUnread(w, "signature refused: "+err.Error())
		return
	}
	body, release, ok := r.readBody(w, req)
	if !ok {
		return
	}
	defer release()
	identity := ""
	var verr error = verify.ErrMissingSignature
	for _, s := range r.cfg.HTTP {
		if verr = verify.Verify(id, ts, sig, body, r.cfg.Now(), r.cfg.Tolerance, s.Secrets...); verr == nil {
			identity = s.Identity
			break
		}
		if !errors.Is(verr, verify.ErrBadSignature) {
			// Missing headers or a stale timestamp fail for every
			// identity alike.
			break
		}
	}
	if verr != nil {
		r.cfg.Log.Warn("webhook: http delivery refused", "err", verr)
		http.Error(w, "signature refused: "+verr.Error(), http.StatusUnauthorized)
		return
	}
	if _, err := payload.HTTP(body, id); err != nil {
		r.cfg.Log.Warn("webhook: http body refused", "err", err)
		http.Error(w, oneLine(err.Error()), http.StatusBadRequest)
		return
	}
	r.keep(w, req, store.WebhookEvent{
		Provider: store.WebhookHTTP, Identity: identity, Body: body,
		Headers: pick(req.Header, "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "Content-Type", "User-Agent"),
	})
}

// keep stores a verified delivery and answers: 200 only once it is
// durable, 500 (the provider retries) when it is not.
func (r *Receiver) keep(w http.ResponseWriter, req *http.Request, ev store.WebhookEvent) {
	ev.ReceivedAt = r.cfg.Now()
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
