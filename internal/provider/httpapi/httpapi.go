// Package httpapi sends messages through the generic idempotent JSON
// messaging API of docs/providers.md (the "http" provider) and classifies every
// answer into a retry class. The provider deduplicates by Idempotency-Key,
// so Idempotent() is true: a call whose outcome is unknown may be repeated
// with the same key.
//
// This comment is the contract the simulator (msgq sim serve) implements.
//
// # Send
//
//	POST {BaseURL}/v1/messages
//	Authorization: Bearer {Token}
//	Idempotency-Key: {Message.Key}     (1-64 of A-Za-z0-9._:-)
//	Content-Type: application/json
//
//	{"ref": "<our message row id>",
//	 "to": "+15551234567",
//	 "channel": "whatsapp",
//	 "template": {"name": "order_ready", "lang": "en_US", "params": ["P1", ...]},
//	 "text": "..."}
//
// Exactly one of "template" and "text" is present: "template" when the
// payload names one (its "params" is always an array, [] when empty),
// otherwise "text". A payload with neither, or a key the header grammar
// does not allow, is refused locally as Permanent without a call.
//
// Answers, and their classes (first match wins):
//
//	202 {"id": "msg_...", "status": "accepted"}             accepted, new
//	200 {"id": "msg_...", "status": "accepted"}
//	    with "Idempotent-Replayed: true"                     accepted, Replayed
//	any other 2xx with a non-empty "id"                      accepted
//	2xx without a JSON "id"                                  ambiguous
//	error "code" idempotency_key_reused (409)                permanent (same key, other body: an operator must look)
//	error "code" window_closed, consent_required             permanent (policy refusal)
//	401                                                      identity
//	error "retryable": true                                  transient (rate_limited on 429)
//	error "retryable": false                                 permanent
//	403                                                      identity
//	429                                                      rate_limited
//	408, 5xx                                                 transient (safe: same key)
//	other 4xx                                                permanent
//	anything else (1xx, 3xx)                                 ambiguous
//
// Error bodies: {"error": {"code": "window_closed", "message": "...",
// "retryable": false}}; every field optional. "code" is copied verbatim into
// Result.Code (a JSON number is copied as its text). A Retry-After header
// (seconds or an HTTP date) on any non-2xx answer becomes Result.RetryAfter.
// RawError is the response body verbatim.
//
// A transport failure is classified by provider.ClassifyTransport: a
// timeout after the request was written is still reported as Ambiguous, and
// the retry table, seeing Idempotent(), retries it with the same key.
//
// # Look-up
//
//	GET {BaseURL}/v1/messages/{id}
//	Authorization: Bearer {Token}
//
//	200 {"id": "msg_...", "status": "delivered"}
//
// Lookup returns "status" verbatim; the simulator's statuses are its own
// (e.g. accepted, sent, delivered, read, failed). Error answers classify as
// for Send (404 is permanent).
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

// Error codes with a fixed meaning.
// CodePairRateLimited is the error code of a rate limit for one recipient.
const CodePairRateLimited = "pair_rate_limited"

const (
	CodeKeyReused       = "idempotency_key_reused"
	CodeWindowClosed    = "window_closed"
	CodeConsentRequired = "consent_required"
)

// Config is one sending identity on the API.
type Config struct {
	BaseURL string // e.g. https://api.example.com; /v1/messages is appended (a trailing /v1 in it is the same API)
	Token   string
	// HTTPClient makes the calls; default one with provider.DefaultTimeout.
	// Its redirect policy is replaced: redirects are never followed.
	HTTPClient *http.Client
	// Now is the clock for Retry-After dates; default time.Now.
	Now func() time.Time
}

// String prints c with the token redacted.
func (c Config) String() string {
	return fmt.Sprintf("httpapi.Config{BaseURL:%q Token:%s}", c.BaseURL, redact(c.Token))
}

// GoString is String, so %#v does not print the token either.
func (c Config) GoString() string { return c.String() }

// LogValue keeps the token out of slog output.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.BaseURL), slog.String("token", redact(c.Token)))
}

func redact(token string) string {
	if token == "" {
		return "(none)"
	}
	return "[redacted]"
}

// apiVersion is the version prefix of every path the client calls.
const apiVersion = "/v1"

// Client sends for one identity. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string // BaseURL without a trailing slash; "" when unusable
	http *http.Client
	now  func() time.Time
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for cfg, filling in its defaults. A base URL that is
// not http(s) is not refused here: every call reports it as an Identity
// result, which pauses the identity rather than failing its rows.
func New(cfg Config) *Client {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{cfg: cfg, http: provider.NoRedirects(cfg.HTTPClient), now: cfg.Now}
	if u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/")); err == nil &&
		(u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		// The API's version is part of every path msgq appends; a base URL
		// written with it (https://api.example.com/v1, as docs/configuration.md has
		// long shown) means the same API, not /v1/v1/messages.
		u.Path = strings.TrimSuffix(u.Path, apiVersion)
		u.RawPath = ""
		c.base = u.String()
	}
	return c
}

// String prints the client's config with the token redacted.
func (c *Client) String() string { return c.cfg.String() }

// Idempotent is true: the API deduplicates by Idempotency-Key.
func (c *Client) Idempotent() bool { return true }

type sendRequest struct {
	Ref      string    `json:"ref"`
	To       string    `json:"to"`
	Channel  string    `json:"channel"`
	Template *template `json:"template,omitempty"`
	Text     string    `json:"text,omitempty"`
}

type template struct {
	Name   string   `json:"name"`
	Lang   string   `json:"lang"`
	Params []string `json:"params"`
}

type messageResponse struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

type errorBody struct {
	Error *struct {
		Code      json.RawMessage `json:"code"`
		Message   string          `json:"message"`
		Retryable *bool           `json:"retryable"`
	} `json:"error"`
}

// Send makes one call. See the package comment for the shapes and the
// classification.
func (c *Client) Send(ctx context.Context, m *provider.Message) provider.Result {
	if c.base == "" {
		return c.misconfigured()
	}
	if !ValidKey(m.Key) {
		return provider.Result{Class: retry.Permanent, RawError: fmt.Sprintf(
			"msgq: key %q cannot be sent as an Idempotency-Key (1-64 of A-Za-z0-9._:-)", m.Key)}
	}
	r := sendRequest{Ref: m.ID, To: m.To, Channel: m.Channel}
	switch p := m.Payload; {
	case p.Template != "":
		r.Template = &template{Name: p.Template, Lang: p.Lang, Params: append([]string{}, p.Params...)}
	case p.Text != "":
		r.Text = p.Text
	default:
		return provider.Result{Class: retry.Permanent, RawError: fmt.Sprintf(
			"msgq: message %s has neither a template nor text to send", m.ID)}
	}
	// Marshal, not an Encoder: no trailing newline, so a body cut short in
	// transit can never parse as a whole request.
	body, err := json.Marshal(r)
	if err != nil {
		return provider.Result{Class: retry.Permanent, RawError: "msgq: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+apiVersion+"/messages", bytes.NewReader(body))
	if err != nil {
		return provider.Result{Class: retry.Identity, RawError: "msgq: " + err.Error()}
	}
	req.Header.Set("Idempotency-Key", m.Key)
	req.Header.Set("Content-Type", "application/json")
	c.auth(req)

	resp, rbody, wrote, err := provider.Do(ctx, c.http, req)
	if resp == nil {
		return provider.ClassifyTransport(err, wrote)
	}
	if err != nil {
		return provider.ClassifyUnreadBody(resp, rbody, err)
	}
	res := c.classify(resp, rbody)
	if res.Class == retry.Accepted {
		res.Replayed = strings.EqualFold(strings.TrimSpace(resp.Header.Get("Idempotent-Replayed")), "true")
	}
	return res
}

// Lookup asks for the provider's status of one message by the provider's
// id. status is the response's "status" verbatim when res.Class is
// Accepted (the look-up succeeded); otherwise it is "" and res says why,
// classified as for Send (404 is Permanent, 5xx Transient, and so on).
func (c *Client) Lookup(ctx context.Context, providerID string) (status string, res provider.Result) {
	if c.base == "" {
		return "", c.misconfigured()
	}
	if providerID == "" {
		return "", provider.Result{Class: retry.Permanent, RawError: "msgq: look-up without a provider id"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+apiVersion+"/messages/"+url.PathEscape(providerID), nil)
	if err != nil {
		return "", provider.Result{Class: retry.Identity, RawError: "msgq: " + err.Error()}
	}
	c.auth(req)
	resp, body, wrote, err := provider.Do(ctx, c.http, req)
	if resp == nil {
		return "", provider.ClassifyTransport(err, wrote)
	}
	if err != nil {
		return "", provider.ClassifyUnreadBody(resp, body, err)
	}
	res = c.classify(resp, body)
	if res.Class != retry.Accepted {
		return "", res
	}
	var mr messageResponse
	if json.Unmarshal(body, &mr) != nil || mr.Status == "" {
		return "", provider.Result{Class: retry.Ambiguous, HTTPStatus: resp.StatusCode, RawError: string(body)}
	}
	return mr.Status, res
}

func (c *Client) auth(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
}

func (c *Client) misconfigured() provider.Result {
	return provider.Result{Class: retry.Identity, RawError: fmt.Sprintf(
		"msgq: http identity misconfigured: need an http(s) base URL (got %q)", c.cfg.BaseURL)}
}

// classify turns one complete response into a Result (the table in the
// package comment).
func (c *Client) classify(resp *http.Response, body []byte) provider.Result {
	status := resp.StatusCode
	res := provider.Result{HTTPStatus: status}
	if provider.IsSuccess(status) {
		var mr messageResponse
		if json.Unmarshal(body, &mr) == nil && mr.ID != "" {
			res.Class = retry.Accepted
			res.ProviderID = mr.ID
			return res
		}
		// A 2xx we cannot read may be a captive portal or a proxy's page;
		// with our key a second try is safe and returns the real answer.
		res.Class = retry.Ambiguous
		res.RawError = string(body)
		return res
	}
	res.RawError = string(body)
	res.RetryAfter = provider.RetryAfter(resp.Header, c.now())

	var retryable *bool
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil {
		res.Code = rawCode(eb.Error.Code)
		retryable = eb.Error.Retryable
	}
	res.Class = classifyError(status, res.Code, retryable)
	res.RecipientOnly = res.Class == retry.RateLimited && res.Code == CodePairRateLimited
	res.WindowClosed = res.Code == CodeWindowClosed
	return res
}

func classifyError(status int, code string, retryable *bool) retry.Class {
	switch code {
	case CodeKeyReused, CodeWindowClosed, CodeConsentRequired:
		return retry.Permanent
	}
	if status == http.StatusUnauthorized {
		return retry.Identity
	}
	if retryable != nil {
		switch {
		case !*retryable:
			return retry.Permanent
		case status == http.StatusTooManyRequests:
			return retry.RateLimited
		default:
			return retry.Transient
		}
	}
	switch {
	case status == http.StatusForbidden:
		return retry.Identity
	case status == http.StatusTooManyRequests:
		return retry.RateLimited
	case status == http.StatusRequestTimeout, status >= 500 && status <= 599:
		return retry.Transient
	case status >= 400 && status <= 499:
		return retry.Permanent
	}
	return retry.Ambiguous
}

// rawCode is the error code as the body spelled it: a JSON string's
// contents, or any other JSON value's text.
func rawCode(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// ValidKey reports whether key fits the Idempotency-Key grammar of
// docs/providers.md: 1-64 of A-Za-z0-9._:-.
func ValidKey(key string) bool {
	if len(key) < 1 || len(key) > 64 {
		return false
	}
	for _, c := range []byte(key) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
