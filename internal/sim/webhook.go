package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgq/msgq/internal/webhook/verify"
)

// Status webhooks
//
// With Config.WebhookURL set, the simulator reports what became of each
// message it accepted over HTTP, the way the real providers do: "sent" at
// once, "delivered" StatusDelay later and, with ReadAfter, "read" ReadAfter
// after that. A message accepted but whose answer a fault lost (drop, slow)
// was accepted all the same, so its statuses are sent too: the real
// provider would send them, and they are how msgq settles such a message
// (by its callback ref: the http API's "ref", WhatsApp's
// biz_opaque_callback_data). Refused calls, idempotent replays, reused keys
// and the in-process Provider send none.
//
//   - http API: POST {WebhookURL}/webhooks/http, one event per request,
//     {"type":"message.status","timestamp":RFC 3339,"data":{"id","status",
//     "previous_status","ref"}}, signed with Standard Webhooks (webhook-id,
//     unique per event and the same on each retry of it; webhook-timestamp,
//     that attempt's; webhook-signature, one v1 signature per secret in
//     WebhookSecrets). Sent only when WebhookSecrets is set.
//   - WhatsApp: POST {WebhookURL}/webhooks/whatsapp, the Cloud API envelope
//     with one status, metadata.phone_number_id the one the send's URL named,
//     signed with X-Hub-Signature-256. Sent only when AppSecret is set.
//
// A small pool of workers posts them from a bounded queue, so the send path
// never waits for a webhook: when the queue is full the event is dropped and
// counted. A post that fails (no connection, or an answer other than 2xx)
// is tried again after WebhookBackoff, doubling, webhookAttempts times in
// all, then dropped with a log line. Statuses of one message may therefore
// arrive out of order, as Meta's do.

// DefaultStatusDelay is the time between "sent" and "delivered" when
// Config.StatusDelay is 0.
const DefaultStatusDelay = 200 * time.Millisecond

// DefaultWebhookBackoff is the first retry's delay when
// Config.WebhookBackoff is 0.
const DefaultWebhookBackoff = time.Second

// Webhook delivery: attempts per event, workers, queue length and the
// timeout of one attempt.
const (
	webhookAttempts = 5
	webhookWorkers  = 4
	webhookQueue    = 1024
	webhookTimeout  = 10 * time.Second
	// webhookGrace is how long Close lets the posts in flight finish
	// before it cancels them.
	webhookGrace = 2 * time.Second
)

// The msgq webhook endpoints the simulator posts to (internal/webhook).
const (
	webhookPathHTTP     = "/webhooks/http"
	webhookPathWhatsApp = "/webhooks/whatsapp"
)

// WebhookStats counts status webhooks. The JSON field names are a contract:
// add, never rename.
type WebhookStats struct {
	Sent    uint64 `json:"sent"`    // events answered 2xx
	Retried uint64 `json:"retried"` // attempts that failed and were tried again
	Failed  uint64 `json:"failed"`  // events given up after the last attempt
	Dropped uint64 `json:"dropped"` // events dropped because the queue was full
}

// whEvent is one status webhook: its body is fixed when the status happens
// and the same on every attempt.
type whEvent struct {
	path    string // webhookPathHTTP or webhookPathWhatsApp
	id      string // webhook-id (http only)
	body    []byte
	desc    string // "msg_3 delivered", for log lines
	attempt int    // attempts made
	// Twilio's callbacks (twilio.go) go to a full URL of their own, as a
	// form, with their signature computed once: url, form and header then
	// replace base+path, JSON and the path's signing.
	url    string
	form   bool
	header http.Header
}

// webhooks posts status webhooks.
type webhooks struct {
	cfg    *Config
	now    func() time.Time
	log    *slog.Logger
	base   string // WebhookURL without a trailing slash
	client *http.Client
	q      chan *whEvent
	ctx    context.Context // the posts'; cancelled when a close's grace runs out
	cancel context.CancelFunc
	stop   chan struct{} // closed by close: the workers take no more events
	wg     sync.WaitGroup
	nonce  string // makes webhook-ids unique across simulator runs
	n      atomic.Uint64

	mu     sync.Mutex
	timers map[*time.Timer]struct{}
	closed bool

	sent, retried, failed, dropped atomic.Uint64
}

func newWebhooks(cfg *Config, now func() time.Time, workers, queue int) *webhooks {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	ctx, cancel := context.WithCancel(context.Background())
	w := &webhooks{
		cfg:    cfg,
		now:    now,
		log:    cfg.Log,
		base:   strings.TrimRight(cfg.WebhookURL, "/"),
		client: &http.Client{Timeout: webhookTimeout},
		q:      make(chan *whEvent, queue),
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
		nonce:  hex.EncodeToString(nonce[:]),
		timers: make(map[*time.Timer]struct{}),
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	for range workers {
		w.wg.Go(w.work)
	}
	return w
}

// close stops the timers and the workers. The posts in flight have
// webhookGrace to finish (their answers are counted) and are then
// cancelled; events not posted yet and retries not due yet are forgotten,
// as a provider that went away would forget them.
func (w *webhooks) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for t := range w.timers {
		t.Stop()
	}
	clear(w.timers)
	w.mu.Unlock()
	close(w.stop)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	grace := time.NewTimer(webhookGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		w.cancel()
		<-done
	}
	w.cancel()
}

func (w *webhooks) stats() WebhookStats {
	return WebhookStats{Sent: w.sent.Load(), Retried: w.retried.Load(), Failed: w.failed.Load(), Dropped: w.dropped.Load()}
}

// after runs f after d unless the webhooks are closed first.
func (w *webhooks) after(d time.Duration, f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	var t *time.Timer
	// t is assigned before the callback can take the lock.
	t = time.AfterFunc(d, func() {
		w.mu.Lock()
		delete(w.timers, t)
		closed := w.closed
		w.mu.Unlock()
		if !closed {
			f()
		}
	})
	w.timers[t] = struct{}{}
}

// enqueue hands ev to the workers without ever waiting.
func (w *webhooks) enqueue(ev *whEvent) {
	select {
	case w.q <- ev:
	default:
		n := w.dropped.Add(1)
		if isPowerOf10(n) { // 1, 10, 100, ...: a full queue does not flood the log
			w.log.Warn("sim: webhook queue full; status dropped", "event", ev.desc, "dropped_total", n)
		}
	}
}

func isPowerOf10(n uint64) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}

func (w *webhooks) work() {
	for {
		select {
		case <-w.stop:
			return
		case ev := <-w.q:
			select {
			case <-w.stop: // both were ready: stopping wins
				return
			default:
			}
			w.post(ev)
		}
	}
}

// post makes one attempt and schedules the next if it failed.
func (w *webhooks) post(ev *whEvent) {
	ev.attempt++
	status, err := w.attempt(ev)
	if err == nil && status >= 200 && status < 300 {
		w.sent.Add(1)
		return
	}
	select {
	case <-w.stop:
		return // shutting down: no retry will be made
	default:
	}
	why := "answer " + strconv.Itoa(status)
	if err != nil {
		why = err.Error()
	}
	if ev.attempt < webhookAttempts {
		w.retried.Add(1)
		w.log.Debug("sim: webhook failed; retrying", "event", ev.desc, "attempt", ev.attempt, "err", why)
		w.after(w.cfg.WebhookBackoff<<(ev.attempt-1), func() { w.enqueue(ev) })
		return
	}
	w.failed.Add(1)
	target := w.base + ev.path
	if ev.url != "" {
		target = "twilio status callback" // the URL is the customer's, with our row id
	}
	w.log.Warn("sim: webhook dropped after its last attempt", "event", ev.desc, "attempts", ev.attempt,
		"url", target, "err", why)
}

func (w *webhooks) attempt(ev *whEvent) (int, error) {
	target := w.base + ev.path
	if ev.url != "" {
		target = ev.url
	}
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, target, bytes.NewReader(ev.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if ev.form {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("User-Agent", "msgq-sim")
	switch {
	case ev.header != nil:
		for k, vs := range ev.header {
			req.Header[k] = vs
		}
	case ev.path == webhookPathHTTP:
		ts := strconv.FormatInt(w.now().Unix(), 10)
		sigs := make([]string, 0, len(w.cfg.WebhookSecrets))
		for _, s := range w.cfg.WebhookSecrets {
			sigs = append(sigs, verify.Sign(ev.id, ts, ev.body, s))
		}
		req.Header.Set("webhook-id", ev.id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", strings.Join(sigs, " "))
	default:
		req.Header.Set("X-Hub-Signature-256", verify.SignWhatsApp(ev.body, w.cfg.AppSecret))
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is logged apart
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// acceptedMsg is a message the provider just accepted, as its webhooks need it.
type acceptedMsg struct {
	api   string // APIHTTP or APIWhatsApp
	id    string // msg_<n> or wamid.<n>
	ref   string
	to    string
	phone string // WhatsApp: the phone-number-id of the send's URL
}

// report schedules the status webhooks of a message just accepted.
func (w *webhooks) report(m acceptedMsg) {
	if m.api == APIHTTP && len(w.cfg.WebhookSecrets) == 0 || m.api == APIWhatsApp && len(w.cfg.AppSecret) == 0 {
		return
	}
	w.enqueue(w.event(m, "sent", "accepted"))
	w.after(w.cfg.StatusDelay, func() { w.enqueue(w.event(m, "delivered", "sent")) })
	if w.cfg.ReadAfter > 0 {
		w.after(w.cfg.StatusDelay+w.cfg.ReadAfter, func() { w.enqueue(w.event(m, "read", "delivered")) })
	}
}

type httpStatusEvent struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      httpStatusEData `json:"data"`
}

type httpStatusEData struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	PreviousStatus string `json:"previous_status,omitempty"`
	Ref            string `json:"ref,omitempty"`
}

type waNotification struct {
	Object string    `json:"object"`
	Entry  []waEntry `json:"entry"`
}

type waEntry struct {
	ID      string     `json:"id"`
	Changes []waChange `json:"changes"`
}

type waChange struct {
	Value waValue `json:"value"`
	Field string  `json:"field"`
}

type waValue struct {
	MessagingProduct string     `json:"messaging_product"`
	Metadata         waMetadata `json:"metadata"`
	Statuses         []waStatus `json:"statuses"`
}

type waMetadata struct {
	DisplayPhoneNumber string `json:"display_phone_number"`
	PhoneNumberID      string `json:"phone_number_id"`
}

type waStatus struct {
	ID                    string `json:"id"`
	Status                string `json:"status"`
	Timestamp             string `json:"timestamp"`
	RecipientID           string `json:"recipient_id"`
	BizOpaqueCallbackData string `json:"biz_opaque_callback_data,omitempty"`
}

// The simulated business account and its display number: the simulator
// has no notion of them, and msgq does not read them.
const (
	simWABA          = "100000000000000"
	simDisplayNumber = "15550000000"
)

// event builds the webhook saying m is now status, stamped now.
func (w *webhooks) event(m acceptedMsg, status, previous string) *whEvent {
	at := w.now().UTC()
	ev := &whEvent{desc: m.id + " " + status}
	if m.api == APIHTTP {
		ev.path = webhookPathHTTP
		ev.id = fmt.Sprintf("evt_%s_%d", w.nonce, w.n.Add(1))
		ev.body = mustJSON(httpStatusEvent{
			Type:      "message.status",
			Timestamp: at.Format(time.RFC3339Nano),
			Data:      httpStatusEData{ID: m.id, Status: status, PreviousStatus: previous, Ref: m.ref},
		})
		return ev
	}
	ev.path = webhookPathWhatsApp
	ev.body = mustJSON(waNotification{
		Object: "whatsapp_business_account",
		Entry: []waEntry{{ID: simWABA, Changes: []waChange{{Field: "messages", Value: waValue{
			MessagingProduct: "whatsapp",
			Metadata:         waMetadata{DisplayPhoneNumber: simDisplayNumber, PhoneNumberID: m.phone},
			Statuses: []waStatus{{
				ID:                    m.id,
				Status:                status,
				Timestamp:             strconv.FormatInt(at.Unix(), 10),
				RecipientID:           strings.TrimPrefix(m.to, "+"),
				BizOpaqueCallbackData: m.ref,
			}},
		}}}}},
	})
	return ev
}
