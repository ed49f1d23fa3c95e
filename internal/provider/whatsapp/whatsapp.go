// Package whatsapp sends messages through Meta's WhatsApp Business Cloud API
// (docs/providers.md) and classifies every answer into a retry class.
//
// # Request
//
//	POST {BaseURL}/{APIVersion}/{PhoneNumberID}/messages
//	Authorization: Bearer {Token}
//	Content-Type: application/json
//
//	{"messaging_product": "whatsapp",
//	 "recipient_type": "individual",
//	 "to": "+15551234567",
//	 "type": "template",
//	 "template": {"name": "order_ready", "language": {"code": "en_US"},
//	              "components": [{"type": "body",
//	                              "parameters": [{"type": "text", "text": "P1"}, ...]}]},
//	 "biz_opaque_callback_data": "<our message row id>"}
//
// components is omitted when the payload has no parameters. A payload
// without a template is sent as free-form text instead:
//
//	{..., "type": "text", "text": {"body": "..."}, "biz_opaque_callback_data": "..."}
//
// A payload with a template is always sent as the template (its text, if
// any, is ignored); one with neither is refused locally as Permanent without
// a call.
//
// "to" is sent exactly as msgq stores it: E.164 with the leading "+". Meta
// accepts the plus, and (by our reading of its phone-number-format notes)
// recommends it: a number without the plus is read relative to the business
// number's country calling code, which can reach the wrong person. A message
// that fails is better than one delivered to a stranger.
//
// # Response
//
// Success (any 2xx): {"messaging_product":"whatsapp","contacts":[{"input":..,"wa_id":..}],
// "messages":[{"id":"wamid...","message_status":"accepted"}]} -> Accepted with
// ProviderID = messages[0].id. Accepted means Meta took it, not that it was
// delivered.
//
// Error: {"error":{"message":..,"type":..,"code":N,"error_subcode":M,
// "error_data":{"messaging_product":"whatsapp","details":..},"fbtrace_id":..}}.
// The class comes from code alone (CodeClass, the table of docs/providers.md);
// the message text and the HTTP status never decide it, except that a code
// the table does not list falls back on the status:
//
//   - 5xx: Ambiguous (something answered with an error we do not know; it
//     may have been forwarded after Meta acted).
//   - 429: RateLimited (a refusal, whatever the code).
//   - 401: Identity (the credential, not the message, is refused).
//   - anything else: Permanent (Meta processed the request and refused it).
//
// An answer without a parseable Meta error body (no "error" object with a
// numeric "code"): 429 is RateLimited; everything else, 5xx, a 2xx without a
// message id, a 3xx, a 4xx from a proxy, is Ambiguous: only Meta's own
// error code proves Meta refused the request, and this API has no
// idempotency key that would make a second try safe.
//
// Code and Subcode are copied verbatim; RawError is the response body
// verbatim. RetryAfter is the larger of a Retry-After header and the delay
// CodeClass attaches to the code.
//
// The token is sent in the Authorization header only, never placed in a
// URL, an error, or a Result, and Config and Client print it redacted.
package whatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

// Defaults for Config.
const (
	DefaultBaseURL    = "https://graph.facebook.com"
	DefaultAPIVersion = "v21.0"
)

// Config is one sending identity on the Cloud API.
type Config struct {
	BaseURL       string // default DefaultBaseURL
	APIVersion    string // default DefaultAPIVersion
	PhoneNumberID string // the business phone number's id (not the number)
	Token         string // a system-user access token
	// HTTPClient makes the calls; default one with provider.DefaultTimeout.
	// Its redirect policy is replaced: redirects are never followed.
	HTTPClient *http.Client
	// Now is the clock for Retry-After dates; default time.Now.
	Now func() time.Time
}

// String prints c with the token redacted.
func (c Config) String() string {
	return fmt.Sprintf("whatsapp.Config{BaseURL:%q APIVersion:%q PhoneNumberID:%q Token:%s}",
		c.BaseURL, c.APIVersion, c.PhoneNumberID, redact(c.Token))
}

// GoString is String, so %#v does not print the token either.
func (c Config) GoString() string { return c.String() }

// LogValue keeps the token out of slog output.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.BaseURL),
		slog.String("api_version", c.APIVersion),
		slog.String("phone_number_id", c.PhoneNumberID),
		slog.String("token", redact(c.Token)),
	)
}

func redact(token string) string {
	if token == "" {
		return "(none)"
	}
	return "[redacted]"
}

// Client sends for one phone number. It is safe for concurrent use.
type Client struct {
	cfg  Config
	url  string // the messages endpoint; "" when the config cannot make one
	http *http.Client
	now  func() time.Time
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for cfg, filling in its defaults. A config that
// cannot work (no phone number id, a bad base URL) is not refused here:
// every Send reports it as an Identity result, which pauses the identity
// rather than failing its rows.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.APIVersion == "" {
		cfg.APIVersion = DefaultAPIVersion
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{cfg: cfg, http: provider.NoRedirects(cfg.HTTPClient), now: cfg.Now}
	if u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/")); err == nil &&
		(u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && cfg.PhoneNumberID != "" {
		c.url = u.String() + "/" + url.PathEscape(strings.Trim(cfg.APIVersion, "/")) +
			"/" + url.PathEscape(cfg.PhoneNumberID) + "/messages"
	}
	return c
}

// String prints the client's config with the token redacted.
func (c *Client) String() string { return c.cfg.String() }

// Idempotent is false: the Cloud API has no idempotency key, so a call whose
// outcome is unknown must not be repeated.
func (c *Client) Idempotent() bool { return false }

// Send makes one call. See the package comment for the shapes and the
// classification.
func (c *Client) Send(ctx context.Context, m *provider.Message) provider.Result {
	if c.url == "" {
		return provider.Result{Class: retry.Identity, RawError: fmt.Sprintf(
			"msgq: whatsapp identity misconfigured: need an http(s) base URL (got %q) and a phone number id (got %q)",
			c.cfg.BaseURL, c.cfg.PhoneNumberID)}
	}
	body, err := requestBody(m)
	if err != nil {
		return provider.Result{Class: retry.Permanent, RawError: "msgq: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return provider.Result{Class: retry.Identity, RawError: "msgq: " + err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")

	resp, rbody, wrote, err := provider.Do(ctx, c.http, req)
	if resp == nil {
		return provider.ClassifyTransport(err, wrote)
	}
	if err != nil {
		return provider.ClassifyUnreadBody(resp, rbody, err)
	}
	return classify(resp.StatusCode, provider.RetryAfter(resp.Header, c.now()), rbody)
}

// The request body (package comment).
type sendRequest struct {
	MessagingProduct      string    `json:"messaging_product"`
	RecipientType         string    `json:"recipient_type"`
	To                    string    `json:"to"`
	Type                  string    `json:"type"`
	Template              *template `json:"template,omitempty"`
	Text                  *text     `json:"text,omitempty"`
	BizOpaqueCallbackData string    `json:"biz_opaque_callback_data,omitempty"`
}

type template struct {
	Name       string      `json:"name"`
	Language   language    `json:"language"`
	Components []component `json:"components,omitempty"`
}

type language struct {
	Code string `json:"code"`
}

type component struct {
	Type       string      `json:"type"`
	Parameters []parameter `json:"parameters"`
}

type parameter struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type text struct {
	Body string `json:"body"`
}

func requestBody(m *provider.Message) ([]byte, error) {
	r := sendRequest{
		MessagingProduct:      "whatsapp",
		RecipientType:         "individual",
		To:                    m.To,
		BizOpaqueCallbackData: m.ID,
	}
	p := m.Payload
	switch {
	case p.Template != "":
		r.Type = "template"
		r.Template = &template{Name: p.Template, Language: language{Code: p.Lang}}
		if len(p.Params) > 0 {
			ps := make([]parameter, len(p.Params))
			for i, v := range p.Params {
				ps[i] = parameter{Type: "text", Text: v}
			}
			r.Template.Components = []component{{Type: "body", Parameters: ps}}
		}
	case p.Text != "":
		r.Type = "text"
		r.Text = &text{Body: p.Text}
	default:
		return nil, fmt.Errorf("message %s has neither a template nor text to send", m.ID)
	}
	// Marshal, not an Encoder: no trailing newline, so a body cut short in
	// transit can never parse as a whole request.
	return json.Marshal(r)
}

type sendResponse struct {
	Messages []struct {
		ID string `json:"id"`
	} `json:"messages"`
}

// errorBody is Meta's error envelope.
type errorBody struct {
	Error *struct {
		Message   string      `json:"message"`
		Type      string      `json:"type"`
		Code      json.Number `json:"code"`
		Subcode   json.Number `json:"error_subcode"`
		ErrorData struct {
			Details string `json:"details"`
		} `json:"error_data"`
		FBTraceID string `json:"fbtrace_id"`
	} `json:"error"`
}

// classify turns one complete response into a Result.
func classify(status int, retryAfter time.Duration, body []byte) provider.Result {
	res := provider.Result{HTTPStatus: status}
	if provider.IsSuccess(status) {
		var ok sendResponse
		if json.Unmarshal(body, &ok) == nil && len(ok.Messages) > 0 && ok.Messages[0].ID != "" {
			res.Class = retry.Accepted
			res.ProviderID = ok.Messages[0].ID
			return res
		}
	}
	res.RawError = string(body)
	res.RetryAfter = retryAfter

	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		res.Code = eb.Error.Code.String()
		res.Subcode = eb.Error.Subcode.String()
		class, delay := classifyError(res.Code, status)
		res.Class = class
		res.RetryAfter = max(retryAfter, delay)
		res.RecipientOnly = res.Code == "131056"
		res.WindowClosed = res.Code == "131047"
		return res
	}

	// No Meta error code: only a refusal by status is certain.
	if status == http.StatusTooManyRequests {
		res.Class = retry.RateLimited
	} else {
		res.Class = retry.Ambiguous
	}
	return res
}

// classifyError maps Meta's error code (as the body spelled it) to a class;
// status only breaks the tie for a code the table does not list.
func classifyError(code string, status int) (retry.Class, time.Duration) {
	if n, err := strconv.ParseInt(code, 10, 64); err == nil {
		if class, delay, known := CodeClass(n); known {
			return class, delay
		}
	}
	switch {
	case status >= 500:
		return retry.Ambiguous, 0
	case status == http.StatusTooManyRequests:
		return retry.RateLimited, 0
	case status == http.StatusUnauthorized:
		return retry.Identity, 0
	}
	return retry.Permanent, 0
}
