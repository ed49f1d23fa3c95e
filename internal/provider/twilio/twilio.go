// Package twilio sends SMS through Twilio Programmable Messaging and
// classifies every answer into a retry class; it also looks messages up for
// reconcile, checks webhook signatures and reads status callbacks and
// inbound messages.
//
// # Request
//
//	POST {BaseURL}/2010-04-01/Accounts/{AccountSID}/Messages.json
//	Authorization: Basic base64(AccountSID:AuthToken)   (or APIKeySID:APIKeySecret)
//	Content-Type: application/x-www-form-urlencoded
//
//	To=+15551234567&From=+15550000000&Body=...&StatusCallback=https://hooks.example/twilio?msgq_id=<row id>
//
// MessagingServiceSid replaces From when the identity sends through a
// Messaging Service. StatusCallback is Config.StatusCallback with our row
// id appended as the msgq_id query parameter (CallbackURL), so every
// callback names its row even when the send's answer was lost.
//
// The body is Payload.Text. Twilio's plain SMS has no templates (its
// Content API templates are a separate product with their own ids), and
// msgq holds a template's name and parameters, not its text, so it cannot
// render one: a payload with a template and no text is refused locally as
// Permanent, without a call. A payload with both is sent as its text.
//
// # Response
//
// Success: 201 with the Message resource, {"sid":"SM...","status":"queued",...}
// -> Accepted with ProviderID = sid. Accepted means Twilio queued it.
//
// Error: {"code":21211,"message":"...","more_info":"...","status":400}. The
// class comes from code (CodeClass, codes.go) when the table lists it;
// otherwise from the HTTP status: 401/403 Identity, 429 RateLimited, other
// 4xx Permanent (Twilio refused the request), 5xx Ambiguous. A 5xx is never
// Transient: Twilio says that a create-message POST is not idempotent and
// that retrying one after a 500 may deliver the message twice
// (https://www.twilio.com/docs/errors/20500). RetryAfter is the
// Retry-After header (Twilio's 429 answers ask for it), at least the
// code's floor.
//
// No answer at all: provider.ClassifyTransport (never written: Transient;
// possibly written: Ambiguous). The Messages API takes no idempotency key
// (the create call documents none, and 20500's page above says a retried
// POST may send twice), so Idempotent is false and an ambiguous send waits
// in unknown for a status callback, Lookup/Find or a person.
package twilio

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

// DefaultBaseURL is Twilio's REST API.
const DefaultBaseURL = "https://api.twilio.com"

// ProviderName names Twilio in webhook evidence (store.StatusEvidence.Provider).
const ProviderName = "twilio"

// CallbackParam is the query parameter msgq appends to StatusCallback.
const CallbackParam = "msgq_id"

// Config is one Twilio sending identity.
type Config struct {
	BaseURL    string // default DefaultBaseURL
	AccountSID string // AC...: in every URL, and the basic-auth user unless APIKeySID is set
	AuthToken  string // the account's auth token; also what signs its webhooks
	// APIKeySID and APIKeySecret (both or neither) authenticate instead of
	// the auth token: an API key can be revoked alone.
	APIKeySID    string
	APIKeySecret string
	// From is the sender (E.164 number, short code or alphanumeric id);
	// MessagingServiceSID (MG...) sends through a Messaging Service
	// instead. Exactly one.
	From                string
	MessagingServiceSID string
	// StatusCallback is the base URL Twilio posts status callbacks to
	// (msgq webhook serve's Twilio endpoint); "" asks for none.
	StatusCallback string
	// HTTPClient makes the calls; nil means provider.NoRedirects(nil). A
	// given client is copied with redirects turned off.
	HTTPClient *http.Client
	// Now is the clock Retry-After dates are read against; nil: time.Now.
	Now func() time.Time
}

// Validate reports every problem with c at once, naming no secret.
func (c Config) Validate() error {
	var errs []string
	if c.BaseURL != "" {
		if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, "base URL must be an http(s) URL with a host")
		}
	}
	if !validSID(c.AccountSID, "AC") {
		errs = append(errs, fmt.Sprintf("account SID must be AC followed by 32 hex digits (got %d characters)", len(c.AccountSID)))
	}
	switch {
	case (c.APIKeySID == "") != (c.APIKeySecret == ""):
		errs = append(errs, "API key SID and API key secret go together")
	case c.APIKeySID == "" && c.AuthToken == "":
		errs = append(errs, "need an auth token or an API key")
	case c.APIKeySID != "" && !validSID(c.APIKeySID, "SK"):
		errs = append(errs, "API key SID must be SK followed by 32 hex digits")
	}
	switch {
	case c.From == "" && c.MessagingServiceSID == "":
		errs = append(errs, "need a From sender or a messaging service SID")
	case c.From != "" && c.MessagingServiceSID != "":
		errs = append(errs, "give a From sender or a messaging service SID, not both")
	case c.MessagingServiceSID != "" && !validSID(c.MessagingServiceSID, "MG"):
		errs = append(errs, "messaging service SID must be MG followed by 32 hex digits")
	}
	if c.StatusCallback != "" {
		if u, err := url.Parse(c.StatusCallback); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
			// Not quoted: a URL may carry a password.
			errs = append(errs, "status callback must be an http(s) URL with a host and no fragment")
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("twilio: %s", strings.Join(errs, "; "))
}

// validSID is Twilio's SID shape: a two-letter prefix and 32 hex digits.
func validSID(s, prefix string) bool {
	if len(s) != 34 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// String prints the config with the secrets redacted.
func (c Config) String() string {
	secret := func(s string) string {
		if s == "" {
			return `""`
		}
		return "[redacted]"
	}
	return fmt.Sprintf("twilio{base=%q account=%q auth_token=%s api_key=%q api_secret=%s from=%q service=%q}",
		c.BaseURL, c.AccountSID, secret(c.AuthToken), c.APIKeySID, secret(c.APIKeySecret), c.From, c.MessagingServiceSID)
}

// Client sends through one Twilio identity. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
	now  func() time.Time
	// messages is .../Accounts/{sid}/Messages (no extension); "" when the
	// config cannot make a URL, and every call then fails as Identity.
	messages string
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for cfg. It does not validate cfg (Validate does):
// a client whose base URL or account SID cannot make a URL answers every
// call Identity, so a bad identity pauses rather than fails its rows.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	c := &Client{cfg: cfg, http: provider.NoRedirects(cfg.HTTPClient), now: cfg.Now}
	if c.now == nil {
		c.now = time.Now
	}
	u, err := url.Parse(cfg.BaseURL)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && cfg.AccountSID != "" {
		c.messages = strings.TrimRight(cfg.BaseURL, "/") + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID) + "/Messages"
	}
	return c
}

// String prints the client's config with the secrets redacted.
func (c *Client) String() string { return c.cfg.String() }

// Idempotent is false: the Messages API has no idempotency key (package
// comment), so a call whose outcome is unknown must not be repeated.
func (c *Client) Idempotent() bool { return false }

// CallbackURL is base with msgq's row id added as the msgq_id query
// parameter, keeping base's own query; "" when base is "".
func CallbackURL(base, id string) string {
	if base == "" {
		return ""
	}
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	q := u.Query()
	q.Set(CallbackParam, id)
	u.RawQuery = q.Encode()
	return u.String()
}

// CallbackID is the msgq_id a callback URL carries ("" when none): the row
// a status callback is about.
func CallbackID(callbackURL string) string {
	u, err := url.Parse(callbackURL)
	if err != nil {
		return ""
	}
	return u.Query().Get(CallbackParam)
}

func (c *Client) misconfigured() provider.Result {
	return provider.Result{Class: retry.Identity, RawError: fmt.Sprintf(
		"msgq: twilio identity misconfigured: need an http(s) base URL (got %q) and an account SID", c.cfg.BaseURL)}
}

func (c *Client) authorize(req *http.Request) {
	if c.cfg.APIKeySID != "" {
		req.SetBasicAuth(c.cfg.APIKeySID, c.cfg.APIKeySecret)
	} else {
		req.SetBasicAuth(c.cfg.AccountSID, c.cfg.AuthToken)
	}
	req.Header.Set("Accept", "application/json")
}

// Form is the create call's form for m, or why m cannot be sent.
func (c *Client) Form(m *provider.Message) (url.Values, error) {
	p := m.Payload
	if p.Text == "" {
		if p.Template != "" {
			return nil, fmt.Errorf("message %s names template %q but has no text: Twilio SMS sends text only", m.ID, p.Template)
		}
		return nil, fmt.Errorf("message %s has no text to send", m.ID)
	}
	f := url.Values{}
	f.Set("To", m.To)
	if c.cfg.MessagingServiceSID != "" {
		f.Set("MessagingServiceSid", c.cfg.MessagingServiceSID)
	} else {
		f.Set("From", c.cfg.From)
	}
	f.Set("Body", p.Text)
	if cb := CallbackURL(c.cfg.StatusCallback, m.ID); cb != "" {
		f.Set("StatusCallback", cb)
	}
	return f, nil
}

// Send makes one create call. See the package comment for the shapes and
// the classification.
func (c *Client) Send(ctx context.Context, m *provider.Message) provider.Result {
	if c.messages == "" {
		return c.misconfigured()
	}
	form, err := c.Form(m)
	if err != nil {
		return provider.Result{Class: retry.Permanent, RawError: "msgq: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.messages+".json", strings.NewReader(form.Encode()))
	if err != nil {
		return provider.Result{Class: retry.Identity, RawError: "msgq: " + err.Error()}
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")

	resp, body, wrote, err := provider.Do(ctx, c.http, req)
	if resp == nil {
		return provider.ClassifyTransport(err, wrote)
	}
	if err != nil {
		return provider.ClassifyUnreadBody(resp, body, err)
	}
	res, _ := classify(resp.StatusCode, provider.RetryAfter(resp.Header, c.now()), body)
	return res
}

// message is the part of Twilio's Message resource msgq reads.
type message struct {
	SID                 string          `json:"sid"`
	Status              string          `json:"status"`
	To                  string          `json:"to"`
	From                string          `json:"from"`
	Body                string          `json:"body"`
	Direction           string          `json:"direction"`
	MessagingServiceSID string          `json:"messaging_service_sid"`
	DateCreated         string          `json:"date_created"` // RFC 2822
	ErrorCode           json.RawMessage `json:"error_code"`   // a number or null
	// StatusCallback is not a documented field of the resource (neither
	// Twilio nor the simulator returns it); read in case an API does.
	StatusCallback string `json:"status_callback"`
}

// errorBody is Twilio's error answer.
type errorBody struct {
	Code     json.Number `json:"code"`
	Message  string      `json:"message"`
	MoreInfo string      `json:"more_info"`
	Status   int         `json:"status"`
}

// classify turns one complete response into a Result, and the message when
// it is one (2xx with a sid).
func classify(status int, retryAfter time.Duration, body []byte) (provider.Result, *message) {
	res := provider.Result{HTTPStatus: status}
	if provider.IsSuccess(status) {
		var m message
		if json.Unmarshal(body, &m) == nil && m.SID != "" {
			res.Class = retry.Accepted
			res.ProviderID = m.SID
			return res, &m
		}
	}
	res.RawError = string(body)
	res.RetryAfter = retryAfter

	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Code != "" {
		res.Code = eb.Code.String()
		class, delay, known := CodeClass(res.Code)
		if !known {
			class = byStatus(status)
		}
		res.Class = class
		res.RetryAfter = max(retryAfter, delay)
		res.OptedOut = OptedOut(res.Code)
		return res, nil
	}
	// No Twilio error code: something answered that may not be Twilio (a
	// proxy, a load balancer); only a refusal by status is certain.
	if status == http.StatusTooManyRequests {
		res.Class = retry.RateLimited
	} else {
		res.Class = retry.Ambiguous
	}
	return res, nil
}

// byStatus classifies a Twilio error answer whose code the table does not
// list.
func byStatus(status int) retry.Class {
	switch {
	case status == http.StatusTooManyRequests:
		return retry.RateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return retry.Identity
	case status >= 400 && status < 500:
		return retry.Permanent
	}
	// 5xx (20500's page: a retried create may send twice), and a 2xx or
	// 3xx carrying an error body, which no documented answer is.
	return retry.Ambiguous
}
