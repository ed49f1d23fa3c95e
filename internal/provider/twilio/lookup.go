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
	"github.com/msgq/msgq/internal/state"
)

// StatusState maps a Twilio message status onto msgq's row state; ok is
// false for a status of no outbound message (receiving, received) or one
// Twilio has not documented.
//
// The statuses (https://www.twilio.com/docs/messaging/api/message-resource,
// "Message status values", and
// https://www.twilio.com/docs/messaging/guides/outbound-message-status-in-status-callbacks):
//
//   - queued, accepted, scheduled, sending, sent -> state.Sent. All say
//     Twilio took the message (a create answers queued, or accepted /
//     scheduled through a Messaging Service) and has not failed it yet.
//     msgq's "sent" means exactly "the provider accepted it" (MACHINE.md);
//     Twilio's finer steps toward the carrier are not states of ours. The
//     state machine's ranks move a row forward only, so a late "sending"
//     never undoes a "delivered".
//   - delivered -> state.Delivered; read -> state.Read (channels with read
//     receipts; plain SMS has none).
//   - undelivered, failed -> state.Failed: Twilio or the carrier gave up;
//     ErrorCode says why.
//   - canceled -> state.Failed: a scheduled message canceled before it was
//     sent; nothing reached the phone.
//   - partially_delivered (a multi-recipient channel's) -> state.Delivered:
//     part of it reached the phone, so "failed" would be false.
func StatusState(status string) (state.State, bool) {
	switch status {
	case "queued", "accepted", "scheduled", "sending", "sent":
		return state.Sent, true
	case "delivered", "partially_delivered":
		return state.Delivered, true
	case "read":
		return state.Read, true
	case "undelivered", "failed", "canceled":
		return state.Failed, true
	}
	return state.None, false
}

// Reconcile looks Twilio rows up by sid, finds those without one, and
// reads the statuses as Twilio means them.
var (
	_ provider.Lookuper     = (*Client)(nil)
	_ provider.Finder       = (*Client)(nil)
	_ provider.StatusMapper = (*Client)(nil)
)

// StatusState is StatusState as the Client's method (provider.StatusMapper):
// reconcile reads the statuses of Lookup and Find with it.
func (c *Client) StatusState(status string) (state.State, bool) { return StatusState(status) }

// Lookup fetches one message by sid:
//
//	GET {BaseURL}/2010-04-01/Accounts/{AccountSID}/Messages/{sid}.json
//
// On 200 the Result is Accepted with ProviderID = sid and Code the
// message's error_code (verbatim, "" for null), and status is Twilio's
// status (StatusState maps it). A 404 is Permanent with status "": Twilio
// has no such message in this account. Other answers are classified as
// Send's (a lost answer here is harmless: a GET changes nothing).
func (c *Client) Lookup(ctx context.Context, sid string) (status string, res provider.Result) {
	if c.messages == "" {
		return "", c.misconfigured()
	}
	if sid == "" || strings.ContainsAny(sid, "/?#") {
		return "", provider.Result{Class: retry.Permanent, RawError: fmt.Sprintf("msgq: %q is not a message sid", sid)}
	}
	res, m := c.get(ctx, c.messages+"/"+url.PathEscape(sid)+".json")
	if m == nil {
		if res.HTTPStatus == http.StatusNotFound {
			res.Class = retry.Permanent
		}
		return "", res
	}
	res.Code = errorCode(m)
	return m.Status, res
}

// FindWindow is how far from the attempt Find looks: messages created
// more than this before or after around are not candidates.
const FindWindow = 15 * time.Minute

// maxFindPages bounds the pages Find reads (of pageSize messages each):
// a recipient with thousands of messages in half an hour is not one a
// unique match could be trusted for anyway.
const (
	maxFindPages = 5
	pageSize     = 1000
)

// Find looks for the message m became at Twilio when the answer to its
// send was lost, for reconcile:
//
//	GET .../Messages.json?To={m.To}&From={From}&DateSent>=D1&DateSent<=D2&PageSize=1000
//
// (From only when the identity sends from a number; DateSent takes whole
// days, https://www.twilio.com/docs/messaging/api/message-resource, "Read
// multiple Message resources", so D1 and D2 are the UTC days around
// around±FindWindow.) A candidate is an outbound message to m.To, from the
// identity's sender or Messaging Service, created within FindWindow of
// around, whose body is m's text. When a listed message carries a status
// callback URL (not a documented field of the resource, and neither
// Twilio's listing nor our simulator's shows one; read in case an API
// does), its msgq_id decides instead: ours matches, another row's does
// not.
//
// found is every candidate, in the listing's order, each with its status
// and error code: which of them other rows already own is for reconcile to
// tell (it asks the store), not this package. Zero candidates prove
// nothing: a message still queued at Twilio may have no date_sent yet and
// so be left out of a DateSent filter. res is Accepted when the listing
// was read whole, else the failed page's classification.
func (c *Client) Find(ctx context.Context, m *provider.Message, around time.Time) (found []provider.Candidate, res provider.Result) {
	if c.messages == "" {
		return nil, c.misconfigured()
	}
	lo, hi := around.Add(-FindWindow).UTC(), around.Add(FindWindow).UTC()
	q := url.Values{}
	q.Set("To", m.To)
	if c.cfg.From != "" {
		q.Set("From", c.cfg.From)
	}
	q.Set("DateSent>", lo.Format(time.DateOnly))
	q.Set("DateSent<", hi.Format(time.DateOnly))
	q.Set("PageSize", fmt.Sprint(pageSize))
	// Twilio's DateSent>=D is, as a query, the key "DateSent>" with the
	// value D: url.Values encodes it as DateSent%3E=D, as Twilio's own
	// libraries do.
	next := c.messages + ".json?" + q.Encode()

	for page := 0; next != ""; page++ {
		if page == maxFindPages {
			return nil, provider.Result{Class: retry.Ambiguous,
				RawError: fmt.Sprintf("msgq: more than %d pages of messages to this recipient; not matching", maxFindPages)}
		}
		var list messageList
		res = c.getJSON(ctx, next, &list)
		if res.Class != retry.Accepted {
			return nil, res
		}
		for i := range list.Messages {
			if lm := &list.Messages[i]; c.candidate(lm, m, lo, hi) {
				found = append(found, provider.Candidate{ID: lm.SID, Status: lm.Status, Code: errorCode(lm)})
			}
		}
		next = ""
		if list.NextPageURI != "" {
			next = strings.TrimRight(c.cfg.BaseURL, "/") + list.NextPageURI
		}
	}
	return found, provider.Result{Class: retry.Accepted, HTTPStatus: http.StatusOK}
}

func (c *Client) candidate(lm *message, m *provider.Message, lo, hi time.Time) bool {
	if !strings.HasPrefix(lm.Direction, "outbound") || lm.To != m.To {
		return false
	}
	if c.cfg.MessagingServiceSID != "" {
		if lm.MessagingServiceSID != c.cfg.MessagingServiceSID {
			return false
		}
	} else if lm.From != c.cfg.From {
		return false
	}
	if lm.StatusCallback != "" {
		return CallbackID(lm.StatusCallback) == m.ID
	}
	t, err := time.Parse(time.RFC1123Z, lm.DateCreated)
	if err != nil || t.Before(lo) || t.After(hi) {
		return false
	}
	return lm.Body == m.Payload.Text
}

type messageList struct {
	Messages    []message `json:"messages"`
	NextPageURI string    `json:"next_page_uri"`
}

func errorCode(m *message) string {
	s := string(m.ErrorCode)
	if s == "null" {
		return ""
	}
	return strings.Trim(s, `"`)
}

// get makes one GET and classifies the answer as Send's.
func (c *Client) get(ctx context.Context, u string) (provider.Result, *message) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return provider.Result{Class: retry.Identity, RawError: "msgq: " + err.Error()}, nil
	}
	c.authorize(req)
	resp, body, wrote, err := provider.Do(ctx, c.http, req)
	if resp == nil {
		return provider.ClassifyTransport(err, wrote), nil
	}
	if err != nil {
		return provider.ClassifyUnreadBody(resp, body, err), nil
	}
	return classify(resp.StatusCode, provider.RetryAfter(resp.Header, c.now()), body)
}

// getJSON makes one GET of a listing into v: Accepted when a 2xx body
// decoded, else the answer classified as Send's.
func (c *Client) getJSON(ctx context.Context, u string, v *messageList) provider.Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return provider.Result{Class: retry.Identity, RawError: "msgq: " + err.Error()}
	}
	c.authorize(req)
	resp, body, wrote, err := provider.Do(ctx, c.http, req)
	if resp == nil {
		return provider.ClassifyTransport(err, wrote)
	}
	if err != nil {
		return provider.ClassifyUnreadBody(resp, body, err)
	}
	if provider.IsSuccess(resp.StatusCode) {
		if err := json.Unmarshal(body, v); err == nil {
			return provider.Result{Class: retry.Accepted, HTTPStatus: resp.StatusCode}
		}
		return provider.Result{Class: retry.Ambiguous, HTTPStatus: resp.StatusCode, RawError: string(body)}
	}
	res, _ := classify(resp.StatusCode, provider.RetryAfter(resp.Header, c.now()), body)
	return res
}
