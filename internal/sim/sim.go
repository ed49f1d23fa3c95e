// Package sim is msgq's fault-injecting provider simulator (docs/providers.md).
//
// One Sim plays a messaging provider three ways at once, over shared state:
//   - the generic HTTP messaging API (POST /v1/messages with Idempotency-Key),
//   - the WhatsApp Cloud API send (POST /{version}/{phone-number-id}/messages),
//   - an in-process provider.Provider with the HTTP API's semantics and no HTTP.
//
// Every message that "reached the phone" is appended to the delivery log
// (Deliveries, GET /deliveries): the oracle for every exactly-once test.
//
// # Faults
//
// Each provider call that passed authentication and request validation
// takes one decision from one draw r in [0,1) of a seeded math/rand/v2 PCG
// source (no draw at all when every probability is 0). The probabilities
// are laid end to end in this fixed order and the first interval holding r
// wins:
//
//	429, 5xx, permanent, pair, drop, slow, otherwise none
//
// So one seed and one sequence of requests give one sequence of outcomes.
// The refusals (429, 5xx, permanent, pair) deliver nothing and keep no
// idempotency key. drop and slow process the call exactly as with no fault
// (accept and record it, replay it, or refuse a reused key) and then lose the
// answer: drop closes the connection without a response, slow answers only
// after SlowDelay. Latency delays every provider call before it is decided,
// so a caller that gives up during the latency delivered nothing.
//
// # Status webhooks
//
// With Config.WebhookURL, the http and WhatsApp APIs report each message
// they accepted to msgq webhook serve, signed as the real providers sign:
// "sent", "delivered" and optionally "read" (webhook.go). A dropped or slow
// answer does not stop them: the message was accepted.
package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgq/msgq/internal/webhook/verify"
)

// The values of Delivery.API.
const (
	APIHTTP      = "http"     // the generic HTTP messaging API
	APIWhatsApp  = "whatsapp" // the WhatsApp Cloud API
	APIInProcess = "sim"      // (*Sim).Provider(): the HTTP API's semantics without HTTP
	APITwilio    = "twilio"   // the Twilio Messages API (twilio.go)
	APISMTP      = "smtp"     // the SMTP server (smtp.go)
)

// DefaultSlowDelay is the slow fault's delay when Config.SlowDelay is 0.
const DefaultSlowDelay = 30 * time.Second

// RetryAfter is the delay the 429 and pair faults state (Retry-After: 1).
const RetryAfter = time.Second

// Config is how the simulated provider behaves. The zero value is a
// provider without faults that ignores idempotency keys; DefaultConfig is
// the usual starting point.
type Config struct {
	// Fault probabilities, each in [0,1], together at most 1.
	Fault429       float64 // rate limited with Retry-After; nothing delivered
	Fault5xx       float64 // retryable server error; nothing delivered
	FaultPermanent float64 // permanent refusal; nothing delivered
	FaultPair      float64 // WhatsApp pair rate limit (131056); nothing delivered
	FaultDrop      float64 // delivered, then the connection is closed without an answer
	FaultSlow      float64 // delivered, answered only after SlowDelay

	Latency   time.Duration // every provider call waits this long before it is decided
	SlowDelay time.Duration // the slow fault's delay; 0 means DefaultSlowDelay

	Seed uint64 // the fault decisions' random source

	// Idempotent makes the HTTP API (and the in-process provider) honour
	// Idempotency-Key: a repeat of an accepted key with the same body is
	// replayed, with another body refused (409). When false the key is
	// ignored and every accepted call is a new delivery. The WhatsApp API
	// has no key and ignores this.
	Idempotent bool

	// Now stamps deliveries and status webhooks; nil means time.Now.
	Now func() time.Time

	// Status webhooks (see webhook.go): with WebhookURL set, every message
	// the http or WhatsApp API accepts is reported to msgq webhook serve
	// at WebhookURL: "sent" at once, "delivered" after StatusDelay, and
	// "read" ReadAfter later when ReadAfter is not 0. Empty: no webhooks.
	// The WhatsApp metadata's phone_number_id is the one the send's URL
	// named, so each WhatsApp identity's statuses come back to it.
	WebhookURL string
	// WebhookSecrets sign the http API's webhooks (Standard Webhooks), one
	// signature per secret, as during a rotation. None: the http API sends
	// no webhooks.
	WebhookSecrets []verify.Secret
	// AppSecret signs the WhatsApp webhooks (X-Hub-Signature-256). Empty:
	// the WhatsApp API sends no webhooks.
	AppSecret   []byte
	StatusDelay time.Duration // "sent" to "delivered"; 0 means DefaultStatusDelay
	ReadAfter   time.Duration // "delivered" to "read"; 0 means no "read"
	// WebhookBackoff is the delay before a failed webhook's first retry,
	// doubled for each next one; 0 means DefaultWebhookBackoff.
	WebhookBackoff time.Duration
	// TwilioAuthToken signs the Twilio API's status callbacks (to each
	// message's StatusCallback URL) and injected inbound messages
	// (X-Twilio-Signature), as the account's auth token signs them at
	// Twilio. Empty: the Twilio API sends no callbacks and cannot inject.
	TwilioAuthToken string
	// TwilioInboundURL receives the inbound messages POST
	// /sim/twilio/inbound injects (msgq webhook serve's Twilio endpoint).
	TwilioInboundURL string
	// Log receives the webhooks' warnings (a webhook given up, a full
	// queue); nil discards them. Secrets are never logged.
	Log *slog.Logger
}

// DefaultConfig is an idempotent provider without faults or latency.
func DefaultConfig() Config {
	return Config{Idempotent: true, SlowDelay: DefaultSlowDelay, Seed: 1}
}

func (c *Config) probabilities() [6]float64 {
	return [6]float64{c.Fault429, c.Fault5xx, c.FaultPermanent, c.FaultPair, c.FaultDrop, c.FaultSlow}
}

var faultNames = [6]string{"fault-429", "fault-5xx", "fault-permanent", "fault-pair", "fault-drop", "fault-slow"}

// Validate reports every problem with c at once. Probabilities are named as
// the `msgq sim serve` flags name them.
func (c Config) Validate() error {
	var errs []error
	sum, ok := 0.0, true
	for i, p := range c.probabilities() {
		// NaN fails every comparison, so test for the valid range.
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("%s must be a probability between 0 and 1 (got %v)", faultNames[i], p))
			ok = false
			continue
		}
		sum += p
	}
	// A little slack for sums like 0.1+0.2+0.7 that round above 1.
	if ok && sum > 1+1e-9 {
		errs = append(errs, fmt.Errorf("fault probabilities add up to %v; at most 1", sum))
	}
	if c.Latency < 0 {
		errs = append(errs, fmt.Errorf("latency must not be negative (got %v)", c.Latency))
	}
	if c.SlowDelay < 0 {
		errs = append(errs, fmt.Errorf("slow-delay must not be negative (got %v)", c.SlowDelay))
	}
	if c.WebhookURL != "" {
		if u, err := url.Parse(c.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.RawQuery != "" || u.Fragment != "" {
			// Not quoted: a URL may carry a password.
			errs = append(errs, errors.New("webhook-url must be an http:// or https:// URL with a host and no query"))
		}
		if len(c.WebhookSecrets) == 0 && len(c.AppSecret) == 0 {
			errs = append(errs, errors.New("webhook-url needs a webhook secret (http API) or an app secret (WhatsApp): nothing could be signed"))
		}
	}
	if c.TwilioInboundURL != "" {
		if u, err := url.Parse(c.TwilioInboundURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
			errs = append(errs, errors.New("twilio-inbound-url must be an http:// or https:// URL with a host"))
		}
		if c.TwilioAuthToken == "" {
			errs = append(errs, errors.New("twilio-inbound-url needs a twilio auth token: the inbound messages could not be signed"))
		}
	}
	if c.StatusDelay < 0 {
		errs = append(errs, fmt.Errorf("status-delay must not be negative (got %v)", c.StatusDelay))
	}
	if c.ReadAfter < 0 {
		errs = append(errs, fmt.Errorf("read-after must not be negative (got %v)", c.ReadAfter))
	}
	if c.WebhookBackoff < 0 {
		errs = append(errs, fmt.Errorf("webhook backoff must not be negative (got %v)", c.WebhookBackoff))
	}
	return errors.Join(errs...)
}

// Delivery is one message that reached the phone. The JSON field names are a
// contract (GET /deliveries): add, never rename.
type Delivery struct {
	Key string    `json:"key"` // the Idempotency-Key header (or Message.Key), "" if none
	Ref string    `json:"ref"` // the http API's "ref", WhatsApp's biz_opaque_callback_data, or Message.ID
	To  string    `json:"to"`
	At  time.Time `json:"at"`  // marshals as RFC 3339 with nanoseconds, UTC
	ID  string    `json:"id"`  // the provider message id: msg_<n>, wamid.<n>, SM<32 hex>, or an email's Message-ID
	API string    `json:"api"` // APIHTTP, APIWhatsApp, APIInProcess, APITwilio or APISMTP
	// Channel is the channel the message went out on where the API
	// implies one ("sms" for Twilio, "email" for a mail the SMTP server
	// accepted); empty for the messaging APIs, whose requests name their own.
	Channel string `json:"channel,omitempty"`
	// Subject is an email's decoded Subject header.
	Subject string `json:"subject,omitempty"`
}

// Call is one provider call the simulator decided (it passed
// authentication and validation), whatever became of it: the call log,
// GET /calls, is the oracle for "no call was made", which the delivery
// log cannot be where a key's replay delivers nothing. The JSON field
// names are a contract: add, never rename.
type Call struct {
	Key string    `json:"key"`
	Ref string    `json:"ref"`
	To  string    `json:"to"`
	At  time.Time `json:"at"`
	API string    `json:"api"`
	// Result is "delivered", "replayed", "conflict", or the fault that
	// refused it ("fault-429", "fault-5xx", "fault-permanent",
	// "fault-pair"). A drop or slow fault does not change it: the call
	// was processed, its answer lost.
	Result string `json:"result"`
}

// fault is one decision's fault, in the order the draw tests them.
type fault uint8

const (
	fault429 fault = iota
	fault5xx
	faultPermanent
	faultPair
	faultDrop
	faultSlow
	faultNone
)

// outcome is what the provider did with a call that was not refused by a fault.
type outcome uint8

const (
	accepted outcome = iota // a new delivery
	replayed                // the key was accepted before with this body
	conflict                // the key was accepted before with another body
)

// decision is one call's fate.
type decision struct {
	fault   fault
	outcome outcome // unless fault is a refusal
	id      string  // accepted, replayed
}

// refused says the fault refused the call: nothing was delivered.
func (f fault) refused() bool { return f < faultDrop }

// request is one send, normalised so the HTTP API and the in-process
// provider compare bodies the same way.
type request struct {
	key, ref, to, channel string
	hasTemplate           bool
	name, lang            string
	params                []string
	text                  string
}

// sameBody compares everything but the key.
func (r *request) sameBody(o *request) bool {
	return r.ref == o.ref && r.to == o.to && r.channel == o.channel && r.hasTemplate == o.hasTemplate &&
		r.name == o.name && r.lang == o.lang && slices.Equal(r.params, o.params) && r.text == o.text
}

type keyEntry struct {
	id  string
	req request
}

// Sim is a simulated provider. It is safe for concurrent use.
type Sim struct {
	cfg Config
	// now is the simulator's clock: Config.Now, moved on by ahead
	// (Advance).
	now   func() time.Time
	ahead atomic.Int64 // nanoseconds
	cum   [6]float64   // cumulative fault thresholds
	draw  bool         // some fault has a non-zero probability

	mu         sync.Mutex
	rng        *rand.Rand
	n          uint64              // provider message ids issued
	keys       map[string]keyEntry // accepted idempotency keys
	ids        map[string]struct{} // msg_ ids, for GET /v1/messages/{id}
	deliveries []Delivery
	calls      []Call
	trace      uint64 // fbtrace_id counter
	tw         twilioState

	wh *webhooks // nil without WebhookURL or TwilioAuthToken
}

// New returns a simulator. It panics if cfg does not Validate: a bad
// configuration is a programming error here; commands validate first.
// With a WebhookURL, Close it when done: it stops the webhook workers.
func New(cfg Config) *Sim { return newSim(cfg, webhookWorkers, webhookQueue) }

func newSim(cfg Config, workers, queue int) *Sim {
	if err := cfg.Validate(); err != nil {
		panic("sim: " + err.Error())
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = DefaultSlowDelay
	}
	if cfg.StatusDelay == 0 {
		cfg.StatusDelay = DefaultStatusDelay
	}
	if cfg.WebhookBackoff == 0 {
		cfg.WebhookBackoff = DefaultWebhookBackoff
	}
	s := &Sim{
		cfg:  cfg,
		rng:  rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		keys: make(map[string]keyEntry),
		ids:  make(map[string]struct{}),
	}
	base := cfg.Now
	if base == nil {
		base = time.Now
	}
	s.now = func() time.Time { return base().Add(time.Duration(s.ahead.Load())) }
	sum := 0.0
	for i, p := range cfg.probabilities() {
		sum += p
		s.cum[i] = sum
	}
	s.draw = sum > 0
	if cfg.WebhookURL != "" || cfg.TwilioAuthToken != "" {
		s.wh = newWebhooks(&s.cfg, s.now, workers, queue)
	}
	return s
}

// Advance moves the simulator's clock d forward, for tests of what
// happens later (POST /sim/clock): the dates of the messages it accepts
// from now on, the statuses it computes and the times it logs. d must be
// positive: the clock never goes back. It returns the clock's new time.
func (s *Sim) Advance(d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("the clock only moves forward: %v is not a positive duration", d)
	}
	s.ahead.Add(int64(d))
	return s.now(), nil
}

// Close stops the status webhooks: the posts in flight get a couple of
// seconds to finish, then are cancelled; statuses not posted yet are
// forgotten. Without a WebhookURL it does nothing. Calling it more than
// once is harmless; the APIs keep answering afterwards, with no webhooks.
func (s *Sim) Close() {
	if s.wh != nil {
		s.wh.close()
	}
}

// WebhookStats counts the status webhooks so far (all zero without a
// WebhookURL).
func (s *Sim) WebhookStats() WebhookStats {
	if s.wh == nil {
		return WebhookStats{}
	}
	return s.wh.stats()
}

// report schedules the status webhooks of a message the http or WhatsApp
// API accepted: a new delivery, whether or not its answer is then lost.
func (s *Sim) report(d decision, api string, r *request, phone string) {
	if s.wh == nil || s.cfg.WebhookURL == "" || d.fault.refused() || d.outcome != accepted {
		return
	}
	s.wh.report(acceptedMsg{api: api, id: d.id, ref: r.ref, to: r.to, phone: phone})
}

// Config returns the configuration in effect (SlowDelay, StatusDelay and
// WebhookBackoff defaulted).
func (s *Sim) Config() Config { return s.cfg }

// Deliveries returns a copy of the delivery log, in order.
func (s *Sim) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// Calls returns a copy of the call log, in order.
func (s *Sim) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// DeliveryCount is len(Deliveries()) without the copy.
func (s *Sim) DeliveryCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deliveries)
}

// ResetDeliveries empties the delivery log. What the provider remembers
// (accepted keys and message ids) is kept: a real provider does not forget
// because a test cleared its notes.
func (s *Sim) ResetDeliveries() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = nil
}

// pick draws this call's fault. s.mu must be held.
func (s *Sim) pick() fault {
	if !s.draw {
		return faultNone
	}
	r := s.rng.Float64()
	for i, c := range s.cum {
		if r < c {
			return fault(i)
		}
	}
	return faultNone
}

// decide draws the call's fault and, unless it refuses the call, applies the
// call: replays or refuses a known key, or accepts and records a delivery.
// Everything happens under one lock, so concurrent calls with one key give
// exactly one delivery.
func (s *Sim) decide(api string, r *request) decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.decideLocked(api, r)
	res := "delivered"
	switch {
	case d.fault.refused():
		res = faultNames[d.fault]
	case d.outcome == replayed:
		res = "replayed"
	case d.outcome == conflict:
		res = "conflict"
	}
	s.calls = append(s.calls, Call{Key: r.key, Ref: r.ref, To: r.to, At: s.now().UTC(), API: api, Result: res})
	return d
}

// decideLocked is decide's decision. s.mu must be held.
func (s *Sim) decideLocked(api string, r *request) decision {
	d := decision{fault: s.pick()}
	// Only the http API and the in-process provider have keys.
	idem := (api == APIHTTP || api == APIInProcess) && s.cfg.Idempotent && r.key != ""
	if d.fault.refused() {
		// A provider that honours keys looks the key up before its
		// business rules: a repeat of an accepted call is never refused
		// for good (its recipient and content were already accepted).
		// Overload (429, 5xx) can still refuse it.
		if _, known := s.keys[r.key]; idem && known && (d.fault == faultPermanent || d.fault == faultPair) {
			d.fault = faultNone
		} else {
			return d
		}
	}
	if idem {
		if e, ok := s.keys[r.key]; ok {
			if e.req.sameBody(r) {
				d.outcome, d.id = replayed, e.id
			} else {
				d.outcome = conflict
			}
			return d
		}
	}
	s.n++
	channel := ""
	switch api {
	case APIWhatsApp:
		d.id = "wamid." + strconv.FormatUint(s.n, 10)
	case APITwilio:
		d.id = fmt.Sprintf("SM%032x", s.n)
		channel = "sms"
	default:
		d.id = "msg_" + strconv.FormatUint(s.n, 10)
		s.ids[d.id] = struct{}{}
	}
	d.outcome = accepted
	if idem {
		e := keyEntry{id: d.id, req: *r}
		e.req.params = slices.Clone(r.params) // the caller's slice may change
		s.keys[r.key] = e
	}
	s.deliveries = append(s.deliveries, Delivery{Key: r.key, Ref: r.ref, To: r.to, At: s.now().UTC(), ID: d.id, API: api, Channel: channel})
	return d
}

// known says id is a msg_ id this provider accepted.
func (s *Sim) known(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

func (s *Sim) traceID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace++
	return "Asim" + strconv.FormatUint(s.trace, 10)
}
