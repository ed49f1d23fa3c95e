package drain_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// metaWindow is a Graph API endpoint that refuses free-form text as Meta
// does outside the customer-service window (131047) and accepts templates;
// it keeps every request body.
type metaWindow struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (m *metaWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(b, &req)
	m.mu.Lock()
	m.bodies = append(m.bodies, req)
	n := len(m.bodies)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if req["type"] == "text" {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"(#131047) Re-engagement message","type":"OAuthException","code":131047,`+
			`"error_data":{"messaging_product":"whatsapp","details":"Message failed to send because more than 24 hours have passed since the customer last replied to this number."},"fbtrace_id":"A"}}`)
		return
	}
	io.WriteString(w, `{"messaging_product":"whatsapp","contacts":[{"input":"x","wa_id":"x"}],"messages":[{"id":"wamid.`+
		strings.Repeat("F", n)+`","message_status":"accepted"}]}`)
}

// TestA131047SwitchesTextToItsFallbackTemplateWithItsParameters: Meta
// refuses a free-form text because the window closed (nothing was sent).
// A row with a fallback template does not fail: its next claim sends the
// fallback, with its parameters, and the row ends sent. A row without one
// fails as before (permanent), with Meta's error verbatim.
func TestA131047SwitchesTextToItsFallbackTemplateWithItsParameters(t *testing.T) {
	t.Parallel()
	s := setup(t, 2, func(i int, p *store.EnqueueParams) {
		p.Payload = store.Payload{Text: "your parcel is at the door"}
		if i == 0 {
			p.Payload.FallbackTemplate, p.Payload.FallbackParams = "parcel_waiting", []string{"Ada", "door 3"}
		}
	})
	meta := &metaWindow{}
	srv := httptest.NewServer(meta)
	defer srv.Close()
	cfg := config(s, whatsapp.New(whatsapp.Config{BaseURL: srv.URL, PhoneNumberID: "1065", Token: "t"}))
	cfg.Concurrency = 1
	sum := drainAll(t, s, cfg)
	if sum.Sent != 1 || sum.Failed != 1 {
		t.Errorf("summary %+v, want the fallback sent and the text without one failed", sum)
	}
	ctx := context.Background()
	m0, err := s.MessageGet(ctx, "", "k-0000")
	if err != nil {
		t.Fatal(err)
	}
	if m0.State != state.Sent || m0.Attempts != 2 {
		t.Errorf("row with a fallback: %s after %d attempts, want sent after 2", m0.State, m0.Attempts)
	}
	h, _ := s.MessageHistory(ctx, m0.ID)
	var sawSwitch, sawSent bool
	for _, e := range h {
		sawSwitch = sawSwitch || (e.To == state.Queued && strings.Contains(e.Detail, "fallback template parcel_waiting goes next"))
		sawSent = sawSent || (e.To == state.Sent && strings.Contains(e.Detail, "sent fallback template parcel_waiting"))
	}
	if !sawSwitch || !sawSent {
		t.Errorf("history does not say what happened: %+v", h)
	}
	atts, _ := s.MessageAttempts(ctx, m0.ID)
	if len(atts) != 2 || atts[0].ProviderCode != "131047" || !strings.Contains(atts[0].RawError, "Re-engagement") {
		t.Errorf("attempts %+v", atts)
	}
	m1, _ := s.MessageGet(ctx, "", "k-0001")
	if m1.State != state.Failed || m1.Reason != state.Permanent || !strings.Contains(m1.LastError, "131047") {
		t.Errorf("row without a fallback: %+v", m1)
	}
	// What Meta got: the two texts, then the template with its parameters.
	meta.mu.Lock()
	defer meta.mu.Unlock()
	var templates int
	for _, b := range meta.bodies {
		if b["type"] != "template" {
			continue
		}
		templates++
		tpl, _ := json.Marshal(b["template"])
		if !strings.Contains(string(tpl), `"name":"parcel_waiting"`) || !strings.Contains(string(tpl), `"text":"Ada"`) ||
			!strings.Contains(string(tpl), `"text":"door 3"`) {
			t.Errorf("fallback template sent as %s", tpl)
		}
	}
	if len(meta.bodies) != 3 || templates != 1 {
		t.Errorf("%d calls, %d templates; want 3 calls (two texts, one fallback)", len(meta.bodies), templates)
	}
}
