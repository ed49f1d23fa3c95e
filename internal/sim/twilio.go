package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/sms"
)

// The Twilio Messages API (internal/provider/twilio's counterpart):
//
//	POST /2010-04-01/Accounts/{AccountSid}/Messages.json        create (form: To, From or MessagingServiceSid, Body, StatusCallback)
//	GET  /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json  fetch one
//	GET  /2010-04-01/Accounts/{AccountSid}/Messages.json        list, newest first: To, From, DateSent, DateSent>, DateSent<, PageSize, PageToken
//	POST /sim/twilio/inbound                                    inject an inbound message: {"from","to","body"}
//
// Every call needs HTTP basic auth with a non-empty password, whose user
// is the path's AccountSid or an API key (SK...): else 401, code 20003.
// The create call is validated (21604 no To, 21211 a To that is not
// E.164, 21603 neither From nor MessagingServiceSid, 21602 no Body, 21609
// a StatusCallback that is not an http(s) URL, 21610 a recipient who
// opted out of that sender), then takes the usual fault draw:
//
//	429        429, code 20429, Retry-After: 1
//	5xx        500, code 20500
//	permanent  400, code 21614 (not a mobile number)
//	pair       429, code 20429 (Twilio has no per-recipient limit of its own)
//	drop/slow  accepted and recorded, answer lost
//
// An accepted message is 201 with the Message resource, status "queued"
// ("accepted" through a Messaging Service), a new delivery with API
// "twilio" and channel "sms". Its status then reads "sent", and
// "delivered" StatusDelay after its creation; with a TwilioAuthToken each
// of those two is also posted to its StatusCallback (Twilio sends none for
// the initial status), signed with X-Twilio-Signature, even when a fault
// lost the create's answer. Twilio has no idempotency key, so none is read.
//
// An injected inbound message is posted at once, signed, to
// TwilioInboundURL; the answer is {"sid","status"} with the inbound URL's
// HTTP status. An opt-out keyword (twilio.OptOutKeyword) blocks sends from
// that number's sender to the customer with 21610 until an opt-in keyword,
// as Twilio does.

const (
	twilioAPIVersion = "2010-04-01"
	twilioBase       = "/" + twilioAPIVersion + "/Accounts/{account}/Messages"
	// simTwilioAccount is the AccountSid of injected inbound messages.
	simTwilioAccount = "AC00000000000000000000000000000000"
	// twilioDefaultPage and twilioMaxPage are Twilio's PageSize default and
	// maximum.
	twilioDefaultPage = 50
	twilioMaxPage     = 1000
)

// twilioState is what the Twilio API remembers.
type twilioState struct {
	mu       sync.Mutex
	msgs     []*twMessage // in creation order
	bySID    map[string]*twMessage
	optedOut map[string]bool // sender+"|"+customer
	inbound  uint64
}

// twMessage is one message the Twilio API accepted.
type twMessage struct {
	sid, account, to, from, service, body, callback string
	created                                         time.Time
}

// twResource is the Message resource's JSON, as much as the simulator
// fills in.
type twResource struct {
	SID                 string  `json:"sid"`
	AccountSID          string  `json:"account_sid"`
	To                  string  `json:"to"`
	From                *string `json:"from"`
	MessagingServiceSID *string `json:"messaging_service_sid"`
	Body                string  `json:"body"`
	Status              string  `json:"status"`
	Direction           string  `json:"direction"`
	NumSegments         string  `json:"num_segments"`
	DateCreated         string  `json:"date_created"`
	DateUpdated         string  `json:"date_updated"`
	DateSent            *string `json:"date_sent"`
	ErrorCode           *int    `json:"error_code"`
	ErrorMessage        *string `json:"error_message"`
	APIVersion          string  `json:"api_version"`
	URI                 string  `json:"uri"`
}

type twError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

func twErr(status, code int, msg string) response {
	return response{status: status, code: strconv.Itoa(code), body: mustJSON(twError{
		Code: code, Message: msg, MoreInfo: "https://www.twilio.com/docs/errors/" + strconv.Itoa(code), Status: status})}
}

func (s *Sim) mountTwilio(mux *http.ServeMux) {
	mux.HandleFunc("POST "+twilioBase+".json", s.twSend)
	mux.HandleFunc("GET "+twilioBase+".json", s.twList)
	mux.HandleFunc("GET "+twilioBase+"/{file}", s.twFetch)
	mux.HandleFunc("POST /sim/twilio/inbound", s.twInject)
}

// twAuth says the request carries basic auth Twilio would take for account.
func twAuth(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	return ok && pass != "" && (user == r.PathValue("account") || strings.HasPrefix(user, "SK") && len(user) > 2)
}

var twUnauthorized = func() response { return twErr(http.StatusUnauthorized, 20003, "Authenticate") }

func (s *Sim) twSend(w http.ResponseWriter, r *http.Request) {
	raw, ok, rerr := s.receive(w, r)
	if !ok {
		return
	}
	if !twAuth(r) {
		resp := twUnauthorized()
		resp.write(w)
		return
	}
	form, err := url.ParseQuery(string(raw))
	if rerr != nil || err != nil {
		resp := twErr(http.StatusBadRequest, 21602, "the request body is not a form")
		resp.write(w)
		return
	}
	m := &twMessage{
		account: r.PathValue("account"), to: form.Get("To"), from: form.Get("From"),
		service: form.Get("MessagingServiceSid"), body: form.Get("Body"), callback: form.Get("StatusCallback"),
	}
	if resp, ok := s.twCheck(m); !ok {
		resp.write(w)
		return
	}
	req := request{ref: twilio.CallbackID(m.callback), to: m.to, channel: "sms", text: m.body}
	d := s.decide(APITwilio, &req)
	var resp response
	switch d.fault {
	case fault429, faultPair:
		resp = twErr(http.StatusTooManyRequests, 20429, "Too Many Requests")
		resp.retryAfter = true
	case fault5xx:
		resp = twErr(http.StatusInternalServerError, 20500, "Internal Server Error")
	case faultPermanent:
		resp = twErr(http.StatusBadRequest, 21614, "'To' number is not a valid mobile number")
	default:
		m.sid, m.created = d.id, s.now().UTC()
		s.tw.add(m)
		s.twReport(m)
		// The create's answer shows the initial status: queued, or
		// accepted through a Messaging Service.
		initial := "queued"
		if m.service != "" {
			initial = "accepted"
		}
		resp = response{status: http.StatusCreated, body: mustJSON(s.twResource(m, initial))}
	}
	s.answer(w, r, d.fault, &resp)
}

// twCheck validates a create call as Twilio does, before any fault.
func (s *Sim) twCheck(m *twMessage) (response, bool) {
	switch {
	case m.to == "":
		return twErr(http.StatusBadRequest, 21604, "A 'To' phone number is required."), false
	case !e164(m.to):
		return twErr(http.StatusBadRequest, 21211, "The 'To' number is not a valid phone number."), false
	case m.from == "" && m.service == "":
		return twErr(http.StatusBadRequest, 21603, "A 'From' phone number is required."), false
	case m.body == "":
		return twErr(http.StatusBadRequest, 21602, "Message body is required."), false
	}
	if m.callback != "" {
		if u, err := url.Parse(m.callback); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return twErr(http.StatusBadRequest, 21609, "Invalid StatusCallback URL"), false
		}
	}
	if s.tw.isOptedOut(m.sender(), m.to) {
		return twErr(http.StatusBadRequest, 21610, "Attempt to send to unsubscribed recipient"), false
	}
	return response{}, true
}

// sender is what an opt-out is recorded against: the number, or the
// Messaging Service (an opt-out from one of its numbers covers them all).
func (m *twMessage) sender() string {
	if m.service != "" {
		return m.service
	}
	return m.from
}

func e164(s string) bool {
	if len(s) < 2 || len(s) > 16 || s[0] != '+' || s[1] == '0' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (t *twilioState) add(m *twMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bySID == nil {
		t.bySID = make(map[string]*twMessage)
	}
	t.msgs = append(t.msgs, m)
	t.bySID[m.sid] = m
}

func (t *twilioState) get(account, sid string) *twMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.bySID[sid]; m != nil && m.account == account {
		return m
	}
	return nil
}

func (t *twilioState) isOptedOut(sender, customer string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.optedOut[sender+"|"+customer]
}

func (t *twilioState) setOptedOut(sender, customer string, out bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.optedOut == nil {
		t.optedOut = make(map[string]bool)
	}
	if out {
		t.optedOut[sender+"|"+customer] = true
	} else {
		delete(t.optedOut, sender+"|"+customer)
	}
}

// twStatus is m's status now: "sent" until StatusDelay after creation,
// then "delivered" (computed, so a look-up needs no timers).
func (s *Sim) twStatus(m *twMessage) string {
	if s.now().Sub(m.created) >= s.cfg.StatusDelay {
		return "delivered"
	}
	return "sent"
}

// twResource is m as the API shows it with status.
func (s *Sim) twResource(m *twMessage, status string) twResource {
	created := m.created.Format(time.RFC1123Z)
	n, _ := sms.Segments(m.body)
	res := twResource{
		SID: m.sid, AccountSID: m.account, To: m.to, Body: m.body, Status: status,
		Direction: "outbound-api", NumSegments: strconv.Itoa(n),
		DateCreated: created, DateUpdated: created, DateSent: &created,
		APIVersion: twilioAPIVersion,
		URI:        "/" + twilioAPIVersion + "/Accounts/" + m.account + "/Messages/" + m.sid + ".json",
	}
	if m.from != "" {
		res.From = &m.from
	}
	if m.service != "" {
		res.MessagingServiceSID = &m.service
	}
	return res
}

func (s *Sim) twFetch(w http.ResponseWriter, r *http.Request) {
	if !twAuth(r) {
		resp := twUnauthorized()
		resp.write(w)
		return
	}
	sid, ok := strings.CutSuffix(r.PathValue("file"), ".json")
	m := s.tw.get(r.PathValue("account"), sid)
	if !ok || m == nil {
		resp := twErr(http.StatusNotFound, 20404, "The requested resource was not found")
		resp.write(w)
		return
	}
	resp := response{status: http.StatusOK, body: mustJSON(s.twResource(m, s.twStatus(m)))}
	resp.write(w)
}

type twPage struct {
	Messages        []twResource `json:"messages"`
	Page            int          `json:"page"`
	PageSize        int          `json:"page_size"`
	URI             string       `json:"uri"`
	FirstPageURI    string       `json:"first_page_uri"`
	NextPageURI     *string      `json:"next_page_uri"`
	PreviousPageURI *string      `json:"previous_page_uri"`
}

func (s *Sim) twList(w http.ResponseWriter, r *http.Request) {
	if !twAuth(r) {
		resp := twUnauthorized()
		resp.write(w)
		return
	}
	q := r.URL.Query()
	size := twilioDefaultPage
	if v := q.Get("PageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			resp := twErr(http.StatusBadRequest, 20001, "PageSize must be a positive integer")
			resp.write(w)
			return
		}
		size = min(n, twilioMaxPage)
	}
	offset := 0
	if v := q.Get("PageToken"); v != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(v, "PT"))
		if err != nil || n < 0 {
			resp := twErr(http.StatusBadRequest, 20001, "invalid PageToken")
			resp.write(w)
			return
		}
		offset = n
	}
	day := func(k string) (string, bool) {
		v := q.Get(k)
		if v == "" {
			return "", true
		}
		_, err := time.Parse(time.DateOnly, v)
		return v, err == nil
	}
	on, ok1 := day("DateSent")
	from, ok2 := day("DateSent>")
	to, ok3 := day("DateSent<")
	if !ok1 || !ok2 || !ok3 {
		resp := twErr(http.StatusBadRequest, 20001, "DateSent must be YYYY-MM-DD")
		resp.write(w)
		return
	}
	account := r.PathValue("account")
	s.tw.mu.Lock()
	var all []*twMessage
	for _, m := range slices.Backward(s.tw.msgs) { // newest first, as Twilio lists
		d := m.created.Format(time.DateOnly)
		if m.account != account || q.Has("To") && m.to != q.Get("To") || q.Has("From") && m.from != q.Get("From") ||
			on != "" && d != on || from != "" && d < from || to != "" && d > to {
			continue
		}
		all = append(all, m)
	}
	s.tw.mu.Unlock()

	base := r.URL.Path
	page := twPage{Messages: []twResource{}, Page: offset / size, PageSize: size}
	keep := url.Values{}
	for k, v := range q {
		if k != "PageToken" {
			keep[k] = v
		}
	}
	page.URI = base + "?" + q.Encode()
	page.FirstPageURI = base + "?" + keep.Encode()
	for i := offset; i < len(all) && i < offset+size; i++ {
		page.Messages = append(page.Messages, s.twResource(all[i], s.twStatus(all[i])))
	}
	if offset+size < len(all) {
		next := url.Values{}
		for k, v := range keep {
			next[k] = v
		}
		next.Set("PageToken", "PT"+strconv.Itoa(offset+size))
		u := base + "?" + next.Encode()
		page.NextPageURI = &u
	}
	resp := response{status: http.StatusOK, body: mustJSON(page)}
	resp.write(w)
}

// twReport schedules m's status callbacks: "sent" now, "delivered" at
// StatusDelay.
func (s *Sim) twReport(m *twMessage) {
	if s.wh == nil || s.cfg.TwilioAuthToken == "" || m.callback == "" {
		return
	}
	s.wh.enqueue(s.twEvent(m, "sent"))
	s.wh.after(s.cfg.StatusDelay, func() { s.wh.enqueue(s.twEvent(m, "delivered")) })
}

// twEvent is m's status callback for status, signed as Twilio signs it.
func (s *Sim) twEvent(m *twMessage, status string) *whEvent {
	f := url.Values{
		"MessageSid":    {m.sid},
		"SmsSid":        {m.sid},
		"MessageStatus": {status},
		"SmsStatus":     {status},
		"AccountSid":    {m.account},
		"To":            {m.to},
		"ApiVersion":    {twilioAPIVersion},
	}
	if m.from != "" {
		f.Set("From", m.from)
	}
	if m.service != "" {
		f.Set("MessagingServiceSid", m.service)
	}
	return &whEvent{
		desc: m.sid + " " + status, url: m.callback, form: true, body: []byte(f.Encode()),
		header: http.Header{twilio.SignatureHeader: {twilio.Signature(m.callback, f, s.cfg.TwilioAuthToken)}},
	}
}

type twInbound struct {
	From string `json:"from"`
	To   string `json:"to"`
	Body string `json:"body"`
}

type twInjected struct {
	SID    string `json:"sid"`
	Status int    `json:"status"` // the inbound URL's answer
}

// twInject posts one inbound message to TwilioInboundURL, signed, and
// answers with the sid it was given and what the inbound URL answered.
func (s *Sim) twInject(w http.ResponseWriter, r *http.Request) {
	var in twInbound
	raw, err := readAll(w, r)
	if err == nil {
		err = json.Unmarshal(raw, &in)
	}
	var resp response
	switch {
	case s.cfg.TwilioAuthToken == "" || s.cfg.TwilioInboundURL == "":
		resp = twErr(http.StatusConflict, 0, "the simulator has no twilio auth token and inbound URL: nothing to post to")
	case err != nil:
		resp = twErr(http.StatusBadRequest, 0, "request body: "+err.Error())
	case !e164(in.From) || !e164(in.To):
		resp = twErr(http.StatusBadRequest, 0, "from and to must be E.164 numbers")
	}
	if resp.status != 0 {
		resp.write(w)
		return
	}
	s.tw.mu.Lock()
	s.tw.inbound++
	sid := fmt.Sprintf("SM%032x", uint64(1)<<63|s.tw.inbound) // apart from the outbound sids
	s.tw.mu.Unlock()
	// The opt-out takes effect at Twilio before the webhook is posted.
	switch out, optIn := twilio.OptOutKeyword(in.Body); {
	case out:
		s.tw.setOptedOut(in.To, in.From, true)
	case optIn:
		s.tw.setOptedOut(in.To, in.From, false)
	}
	n, _ := sms.Segments(in.Body)
	f := url.Values{
		"MessageSid":  {sid},
		"SmsSid":      {sid},
		"AccountSid":  {simTwilioAccount},
		"From":        {in.From},
		"To":          {in.To},
		"Body":        {in.Body},
		"NumMedia":    {"0"},
		"NumSegments": {strconv.Itoa(n)},
		"SmsStatus":   {"received"},
		"ApiVersion":  {twilioAPIVersion},
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, s.cfg.TwilioInboundURL, strings.NewReader(f.Encode()))
	if err != nil {
		resp = twErr(http.StatusInternalServerError, 0, err.Error())
		resp.write(w)
		return
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "msgq-sim")
	req.Header.Set(twilio.SignatureHeader, twilio.Signature(s.cfg.TwilioInboundURL, f, s.cfg.TwilioAuthToken))
	c := &http.Client{Timeout: webhookTimeout}
	hr, err := c.Do(req)
	if err != nil {
		resp = twErr(http.StatusBadGateway, 0, "posting the inbound message failed")
		resp.write(w)
		return
	}
	hr.Body.Close()
	resp = response{status: http.StatusOK, body: mustJSON(twInjected{SID: sid, Status: hr.StatusCode})}
	resp.write(w)
}

func readAll(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}
