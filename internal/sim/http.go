package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// Handler serves the simulated APIs:
//
//	POST   /v1/messages                            the generic HTTP messaging API
//	GET    /v1/messages/{id}                       look-up: {"id","status":"accepted"} or 404
//	POST   /{version}/{phone-number-id}/messages   the WhatsApp Cloud API send
//	       /2010-04-01/Accounts/{sid}/Messages...  the Twilio Messages API (twilio.go)
//	GET    /deliveries                             the delivery log, a JSON array of Delivery
//	DELETE /deliveries                             empties the delivery log (ResetDeliveries)
//	GET    /calls                                  the call log, a JSON array of Call
//	POST   /sim/clock                              {"advance":"20m"}: move the clock forward (Advance)
//
// Latency and faults apply to the two POSTs only; the look-up and the
// delivery log always answer at once.
//
// With Config.WebhookURL, each message the two POSTs accept is reported by
// status webhooks (see webhook.go), even when a fault then loses the answer.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.httpSend)
	mux.HandleFunc("GET /v1/messages/{id}", s.httpGet)
	mux.HandleFunc("POST /{version}/{phone}/messages", s.waSend)
	mux.HandleFunc("GET /deliveries", s.getDeliveries)
	s.mountTwilio(mux) // twilio.go
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) {
		cs := s.Calls()
		if cs == nil {
			cs = []Call{}
		}
		resp := response{status: http.StatusOK, body: mustJSON(cs)}
		resp.write(w)
	})
	mux.HandleFunc("DELETE /deliveries", func(w http.ResponseWriter, _ *http.Request) {
		s.ResetDeliveries()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /sim/clock", s.advanceClock)
	return mux
}

// advanceClock serves POST /sim/clock {"advance":"20m"}: it moves the
// clock forward and answers {"now": the new time}, or 400 with
// {"error"} for a body that is not a positive duration.
func (s *Sim) advanceClock(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Advance string `json:"advance"`
	}
	var now time.Time
	err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req)
	if err == nil {
		var d time.Duration
		if d, err = time.ParseDuration(req.Advance); err == nil {
			now, err = s.Advance(d)
		}
	}
	if err != nil {
		resp := response{status: http.StatusBadRequest, body: mustJSON(map[string]string{"error": `want {"advance": "20m"}: ` + err.Error()})}
		resp.write(w)
		return
	}
	resp := response{status: http.StatusOK, body: mustJSON(map[string]string{"now": now.UTC().Format(time.RFC3339Nano)})}
	resp.write(w)
}

// response is an answer not yet written, so a fault can delay or lose it.
type response struct {
	status     int
	retryAfter bool   // Retry-After: RetryAfter
	replayed   bool   // Idempotent-Replayed: true
	code       string // the error code, if an error
	body       []byte
}

func (r *response) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if r.retryAfter {
		h.Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	}
	if r.replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

// answer writes resp as fault f says: at once, after SlowDelay, or never.
func (s *Sim) answer(w http.ResponseWriter, r *http.Request, f fault, resp *response) {
	switch f {
	case faultDrop:
		dropConn(w)
		return
	case faultSlow:
		if !wait(r.Context(), s.cfg.SlowDelay) {
			// The caller hung up or the server is stopping: no answer at
			// all, rather than the empty 200 net/http would send.
			dropConn(w)
			return
		}
	}
	resp.write(w)
}

// dropConn closes the connection without a response. HTTP/2 cannot be
// hijacked; aborting the handler resets the stream instead.
func dropConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// wait sleeps for d unless ctx ends first, and says whether it slept.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// bearer says the request carries a non-empty bearer token.
func bearer(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(token) != ""
}

// receive reads the whole request body and then waits out the latency. The
// body comes first: net/http notices a caller hanging up (and cancels the
// request's context) only once the body has been consumed. ok is false when
// the caller hung up (or the server is stopping) during the latency:
// nothing is decided, and the connection is closed without an answer.
func (s *Sim) receive(w http.ResponseWriter, r *http.Request) (body []byte, ok bool, err error) {
	body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if !wait(r.Context(), s.cfg.Latency) {
		dropConn(w)
		return nil, false, err
	}
	return body, true, err
}

// decodeJSON decodes a body receive read, or reports why it could not.
func decodeJSON(b []byte, err error, v any) error {
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs are marshalled
	}
	return b
}

// ---- the generic HTTP messaging API ----

type httpTemplate struct {
	Name   string   `json:"name"`
	Lang   string   `json:"lang"`
	Params []string `json:"params"`
}

type httpBody struct {
	Ref      string        `json:"ref"`
	To       string        `json:"to"`
	Channel  string        `json:"channel"`
	Template *httpTemplate `json:"template,omitempty"`
	Text     string        `json:"text,omitempty"`
}

type httpAccepted struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

type httpErrorBody struct {
	Error httpError `json:"error"`
}

type httpError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// The http API's error codes.
const (
	codeUnauthorized    = "unauthorized"
	codeInvalidRequest  = "invalid_request"
	codeInvalidKey      = "invalid_idempotency_key"
	codeKeyReused       = "idempotency_key_reused"
	codeRateLimited     = "rate_limited"
	codePairRateLimited = "pair_rate_limited"
	codeInternal        = "internal"
	codeInvalidRecip    = "invalid_recipient"
	codeNotFound        = "not_found"
)

func httpErr(status int, code, msg string, retryable bool) response {
	return response{status: status, code: code, body: mustJSON(httpErrorBody{httpError{code, msg, retryable}})}
}

// checkHTTP validates a send the way the http API does, before any fault.
func (s *Sim) checkHTTP(r *request) (response, bool) {
	if s.cfg.Idempotent && r.key != "" && !store.ValidKey(r.key) {
		return httpErr(http.StatusBadRequest, codeInvalidKey,
			fmt.Sprintf("Idempotency-Key %q must be 1 to 64 characters of A-Za-z0-9._:-", r.key), false), false
	}
	if r.to == "" {
		return httpErr(http.StatusBadRequest, codeInvalidRequest, "to is required", false), false
	}
	if r.hasTemplate && r.name == "" {
		return httpErr(http.StatusBadRequest, codeInvalidRequest, "template.name is required", false), false
	}
	if !r.hasTemplate && r.text == "" {
		return httpErr(http.StatusBadRequest, codeInvalidRequest, "give template or text", false), false
	}
	return response{}, true
}

// httpResponse is the http API's answer to decision d.
func httpResponse(d decision, key string) response {
	switch d.fault {
	case fault429:
		resp := httpErr(http.StatusTooManyRequests, codeRateLimited, "rate limit exceeded", true)
		resp.retryAfter = true
		return resp
	case fault5xx:
		return httpErr(http.StatusInternalServerError, codeInternal, "internal error", true)
	case faultPermanent:
		return httpErr(http.StatusUnprocessableEntity, codeInvalidRecip, "the recipient cannot receive messages", false)
	case faultPair:
		resp := httpErr(http.StatusTooManyRequests, codePairRateLimited, "too many messages to this recipient", true)
		resp.retryAfter = true
		return resp
	}
	switch d.outcome {
	case replayed:
		return response{status: http.StatusOK, replayed: true, body: mustJSON(httpAccepted{d.id, "accepted"})}
	case conflict:
		return httpErr(http.StatusConflict, codeKeyReused,
			fmt.Sprintf("Idempotency-Key %q was already used with a different request body", key), false)
	}
	return response{status: http.StatusAccepted, body: mustJSON(httpAccepted{d.id, "accepted"})}
}

func (s *Sim) httpSend(w http.ResponseWriter, r *http.Request) {
	raw, ok, rerr := s.receive(w, r)
	if !ok {
		return
	}
	if !bearer(r) {
		resp := httpErr(http.StatusUnauthorized, codeUnauthorized, "missing or malformed bearer token", false)
		resp.write(w)
		return
	}
	var b httpBody
	if err := decodeJSON(raw, rerr, &b); err != nil {
		resp := httpErr(http.StatusBadRequest, codeInvalidRequest, "request body: "+err.Error(), false)
		resp.write(w)
		return
	}
	req := request{key: r.Header.Get("Idempotency-Key"), ref: b.Ref, to: b.To, channel: b.Channel, text: b.Text}
	if b.Template != nil {
		req.hasTemplate, req.name, req.lang, req.params = true, b.Template.Name, b.Template.Lang, b.Template.Params
	}
	if resp, ok := s.checkHTTP(&req); !ok {
		resp.write(w)
		return
	}
	d := s.decide(APIHTTP, &req)
	s.report(d, APIHTTP, &req, "")
	resp := httpResponse(d, req.key)
	s.answer(w, r, d.fault, &resp)
}

func (s *Sim) httpGet(w http.ResponseWriter, r *http.Request) {
	if !bearer(r) {
		resp := httpErr(http.StatusUnauthorized, codeUnauthorized, "missing or malformed bearer token", false)
		resp.write(w)
		return
	}
	id := r.PathValue("id")
	resp := httpErr(http.StatusNotFound, codeNotFound, fmt.Sprintf("no message %q", id), false)
	if s.known(id) {
		resp = response{status: http.StatusOK, body: mustJSON(httpAccepted{id, "accepted"})}
	}
	resp.write(w)
}

func (s *Sim) getDeliveries(w http.ResponseWriter, _ *http.Request) {
	ds := s.Deliveries()
	if ds == nil {
		ds = []Delivery{} // [] rather than null
	}
	resp := response{status: http.StatusOK, body: mustJSON(ds)}
	resp.write(w)
}

// ---- the WhatsApp Cloud API ----

type waBody struct {
	MessagingProduct string `json:"messaging_product"`
	RecipientType    string `json:"recipient_type"`
	To               string `json:"to"`
	Type             string `json:"type"`
	Template         *struct {
		Name     string `json:"name"`
		Language struct {
			Code string `json:"code"`
		} `json:"language"`
		Components json.RawMessage `json:"components"`
	} `json:"template"`
	Text *struct {
		Body       string `json:"body"`
		PreviewURL bool   `json:"preview_url"`
	} `json:"text"`
	BizOpaqueCallbackData string `json:"biz_opaque_callback_data"`
}

type waContact struct {
	Input string `json:"input"`
	WaID  string `json:"wa_id"`
}

type waMessage struct {
	ID            string `json:"id"`
	MessageStatus string `json:"message_status"`
}

type waSuccess struct {
	MessagingProduct string      `json:"messaging_product"`
	Contacts         []waContact `json:"contacts"`
	Messages         []waMessage `json:"messages"`
}

type waErrorBody struct {
	Error waError `json:"error"`
}

type waError struct {
	Message      string       `json:"message"`
	Type         string       `json:"type"`
	Code         int          `json:"code"`
	ErrorSubcode int          `json:"error_subcode,omitempty"`
	ErrorData    *waErrorData `json:"error_data,omitempty"`
	FBTraceID    string       `json:"fbtrace_id"`
}

type waErrorData struct {
	MessagingProduct string `json:"messaging_product"`
	Details          string `json:"details"`
}

// The Graph API error codes the simulator returns (docs/providers.md).
const (
	waInvalidParameter = 100
	waAuth             = 190
	waRateLimit        = 130429
	waUnknown          = 131000
	waUndeliverable    = 131026
	waPairRateLimit    = 131056
)

func (s *Sim) waErr(status, code int, msg, details string) response {
	e := waError{Message: msg, Type: "OAuthException", Code: code, FBTraceID: s.traceID()}
	if details != "" {
		e.ErrorData = &waErrorData{MessagingProduct: "whatsapp", Details: details}
	}
	return response{status: status, body: mustJSON(waErrorBody{e})}
}

func (s *Sim) waInvalid(details string) response {
	return s.waErr(http.StatusBadRequest, waInvalidParameter, "(#100) Invalid parameter", details)
}

// waResponse is the Graph API's answer to decision d. Meta answers rate
// limits with HTTP 400 and no Retry-After; clients decide on the code.
func (s *Sim) waResponse(d decision, to string) response {
	switch d.fault {
	case fault429:
		return s.waErr(http.StatusBadRequest, waRateLimit, "(#130429) Rate limit hit",
			"Cloud API message throughput has been reached.")
	case fault5xx:
		return s.waErr(http.StatusInternalServerError, waUnknown, "(#131000) Something went wrong",
			"Something went wrong")
	case faultPermanent:
		return s.waErr(http.StatusBadRequest, waUndeliverable, "(#131026) Message undeliverable",
			"Message Undeliverable.")
	case faultPair:
		return s.waErr(http.StatusBadRequest, waPairRateLimit,
			"(#131056) (Business Account, Consumer Account) pair rate limit hit",
			"Message failed to send because there were too many messages sent from this phone number to the same phone number in a short period of time.")
	}
	return response{status: http.StatusOK, body: mustJSON(waSuccess{
		MessagingProduct: "whatsapp",
		Contacts:         []waContact{{Input: to, WaID: strings.TrimPrefix(to, "+")}},
		Messages:         []waMessage{{ID: d.id, MessageStatus: "accepted"}},
	})}
}

func (s *Sim) waSend(w http.ResponseWriter, r *http.Request) {
	raw, ok, rerr := s.receive(w, r)
	if !ok {
		return
	}
	if !bearer(r) {
		resp := s.waErr(http.StatusUnauthorized, waAuth, "Invalid OAuth access token - Cannot parse access token", "")
		resp.write(w)
		return
	}
	var b waBody
	if err := decodeJSON(raw, rerr, &b); err != nil {
		resp := s.waInvalid("request body: " + err.Error())
		resp.write(w)
		return
	}
	var resp response
	ok = false
	switch {
	case b.MessagingProduct != "whatsapp":
		resp = s.waInvalid(`messaging_product must be "whatsapp"`)
	case b.To == "":
		resp = s.waInvalid("to is required")
	case b.Type == "template" && (b.Template == nil || b.Template.Name == "" || b.Template.Language.Code == ""):
		resp = s.waInvalid("template.name and template.language.code are required")
	case (b.Type == "text" || b.Type == "") && (b.Text == nil || b.Text.Body == ""):
		resp = s.waInvalid("text.body is required")
	case b.Type != "template" && b.Type != "text" && b.Type != "":
		resp = s.waInvalid(fmt.Sprintf("type %q is not simulated (template or text)", b.Type))
	default:
		ok = true
	}
	if !ok {
		resp.write(w)
		return
	}
	req := request{key: r.Header.Get("Idempotency-Key"), ref: b.BizOpaqueCallbackData, to: b.To}
	d := s.decide(APIWhatsApp, &req)
	s.report(d, APIWhatsApp, &req, r.PathValue("phone"))
	resp = s.waResponse(d, b.To)
	s.answer(w, r, d.fault, &resp)
}
