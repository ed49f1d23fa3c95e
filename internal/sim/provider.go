package sim

import (
	"context"
	"net/http"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

// Provider returns an in-process provider with the HTTP API's semantics
// (idempotency keys, the same faults from the same draws, the same codes)
// and no HTTP. Its deliveries are recorded with API "sim". Message.ID is the
// delivery's ref, as the http API's "ref".
//
// The results: accepted -> Accepted with ProviderID (HTTPStatus 202);
// replay -> Accepted, Replayed (200); reused key -> Permanent (409,
// idempotency_key_reused); 429 -> RateLimited with RetryAfter; 5xx ->
// Transient; permanent -> Permanent (422, invalid_recipient); pair ->
// RateLimited (pair_rate_limited, RetryAfter); drop and slow -> the call is
// applied (a delivery recorded) and Ambiguous returned at once, HTTPStatus 0,
// as if the answer had been lost or the caller's deadline had passed first.
// With Latency, Send waits first; a ctx that ends during the wait gives
// Ambiguous (nothing delivered, but the caller cannot know that), and a ctx
// already done before Send gives Transient (nothing was sent).
// It sends no status webhooks, whatever Config.WebhookURL says: it has no
// HTTP side, and no msgq identity would receive them.
func (s *Sim) Provider() provider.Provider { return inProcess{s} }

type inProcess struct{ s *Sim }

func (p inProcess) Idempotent() bool { return p.s.cfg.Idempotent }

func (p inProcess) Send(ctx context.Context, m *provider.Message) provider.Result {
	s := p.s
	if err := ctx.Err(); err != nil {
		return provider.Result{Class: retry.Transient, RawError: "sim: not sent: " + err.Error()}
	}
	if !wait(ctx, s.cfg.Latency) {
		return provider.Result{Class: retry.Ambiguous, RawError: "sim: no answer: " + ctx.Err().Error()}
	}
	req := request{key: m.Key, ref: m.ID, to: m.To, channel: m.Channel, text: m.Payload.Text}
	if m.Payload.Template != "" {
		req.hasTemplate, req.name, req.lang, req.params = true, m.Payload.Template, m.Payload.Lang, m.Payload.Params
	}
	if resp, ok := s.checkHTTP(&req); !ok {
		return errorResult(retry.Permanent, &resp)
	}
	d := s.decide(APIInProcess, &req)
	switch d.fault {
	case faultDrop:
		return provider.Result{Class: retry.Ambiguous, RawError: "sim: connection closed without a response"}
	case faultSlow:
		return provider.Result{Class: retry.Ambiguous, RawError: "sim: no answer before the deadline"}
	case faultNone:
		switch d.outcome {
		case accepted:
			return provider.Result{Class: retry.Accepted, ProviderID: d.id, HTTPStatus: http.StatusAccepted}
		case replayed:
			return provider.Result{Class: retry.Accepted, ProviderID: d.id, HTTPStatus: http.StatusOK, Replayed: true}
		}
	}
	resp := httpResponse(d, req.key)
	switch d.fault {
	case fault429, faultPair:
		r := errorResult(retry.RateLimited, &resp)
		r.RetryAfter = RetryAfter
		r.RecipientOnly = d.fault == faultPair
		return r
	case fault5xx:
		return errorResult(retry.Transient, &resp)
	}
	return errorResult(retry.Permanent, &resp) // permanent fault, reused key
}

// errorResult carries an http API error answer: its status, code and body.
func errorResult(c retry.Class, resp *response) provider.Result {
	return provider.Result{Class: c, HTTPStatus: resp.status, Code: resp.code, RawError: string(resp.body)}
}
