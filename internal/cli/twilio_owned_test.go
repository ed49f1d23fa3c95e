package cli_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// Modes of twFaultProxy for the next Twilio create.
const (
	passCreate   int32 = iota
	refuseCreate       // answer Twilio's 500/20500 without forwarding: Twilio created nothing
	loseCreate         // forward (Twilio creates the message), then answer 500/20500: the answer is lost
)

// twFaultProxy stands in front of the simulator's Twilio API and passes
// every request through, except the one next create its mode names.
type twFaultProxy struct {
	t    *testing.T
	URL  string
	next atomic.Int32
}

// twilio500 is Twilio's answer to a create that failed on its side
// (https://www.twilio.com/docs/errors/20500): msgq cannot know whether
// the message was created, so the row becomes unknown with no SID.
const twilio500 = `{"code": 20500, "message": "Internal Server Error", "more_info": "https://www.twilio.com/docs/errors/20500", "status": 500}`

func newTwFaultProxy(t *testing.T, sim string) *twFaultProxy {
	target, err := url.Parse(sim)
	if err != nil {
		t.Fatal(err)
	}
	p := &twFaultProxy{t: t}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, ErrorLog: log.New(io.Discard, "", 0)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/Messages.json") {
			switch p.next.Swap(passCreate) {
			case refuseCreate:
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, twilio500)
				return
			case loseCreate:
				rec := httptest.NewRecorder()
				rp.ServeHTTP(rec, r)
				if rec.Code != http.StatusCreated {
					p.t.Errorf("the create the proxy forwarded got %d: %s", rec.Code, rec.Body)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, twilio500)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// advanceSim moves the simulator's clock forward (POST /sim/clock).
func advanceSim(t *testing.T, sim string, d time.Duration) {
	t.Helper()
	resp, err := http.Post(sim+"/sim/clock", "application/json", strings.NewReader(fmt.Sprintf(`{"advance":%q}`, d)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /sim/clock: %d", resp.StatusCode)
	}
}

type stuckNoteJSON struct {
	ID, Key, State string
	Note           string `json:"reconcile_note"`
}

// TestReconcileSettlesOnlyOnAMessageNoOtherRowOwns (issue 24): a Twilio
// create answered 500/20500 leaves its row unknown with no SID, and
// reconcile searches the recipient's messages by text. A message that
// another row of the identity already records is that row's, never this
// one's:
//
//	(a) a second logical send of the same text to the same number, sent;
//	(b) the operator's own resend (--accept-duplicate-risk) of the row;
//	(c) as (a), with a third send of the text dated 20 minutes later
//	    (the simulator's clock moved on), outside the search window: not
//	    even listed;
//
// each leaves the row unknown, and stuck shows why: every listed message
// and the row that owns it. The positive case: a create that went
// through with its answer lost (the proxy forwards it, then answers 500)
// is settled on its own message, the one no other row owns, though the
// twin's message is listed too. Nothing is sent by reconcile, and a
// second run changes nothing. Both stores, real processes: msgq,
// msgq sim serve, and a proxy that answers Twilio's 500 itself.
func TestReconcileSettlesOnlyOnAMessageNoOtherRowOwns(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t, "--status-delay", "1h")
		px := newTwFaultProxy(t, sim)
		cfg := fmt.Sprintf("identities:\n  tw: {provider: twilio, base_url: %s, account_sid_env: MSGQ_TEST_TWILIO_SID, auth_token_env: MSGQ_TEST_TWILIO_TOKEN, from: \"+15005550006\"}\n", px.URL)
		e := newOpEnv(t, kind, cfg)
		e.env = append(e.env, "MSGQ_TEST_TWILIO_SID=AC"+strings.Repeat("0a", 16), "MSGQ_TEST_TWILIO_TOKEN=test-token")
		send := func(key, to, text string) {
			t.Helper()
			e.run("send", "--identity", "tw", "--key", key, "--to", to, "--text", text)
		}
		// unknown sends key through a create the proxy refuses or loses.
		unknown := func(mode int32, key, to, text string) {
			t.Helper()
			send(key, to, text)
			px.next.Store(mode)
			e.run("drain")
			if m := e.get(key); m.State != state.Unknown || m.ProviderID != "" {
				t.Fatalf("%s after its 500: %s, provider id %q; want unknown without a SID", key, m.State, m.ProviderID)
			}
		}
		const (
			toA, toB, toC, toD = "+15557770001", "+15557770002", "+15557770003", "+15557770004"
			thanks, ready      = "Thanks for your order!", "Your table is ready"
			parcel, tomorrow   = "Your parcel is on its way", "See you tomorrow"
		)
		unknown(refuseCreate, "order-1", toA, thanks)
		unknown(refuseCreate, "rcpt-1", toB, ready)
		unknown(refuseCreate, "late-1", toC, parcel)
		unknown(loseCreate, "lost-1", toD, tomorrow)
		send("order-2", toA, thanks)                                                  // (a)
		e.run("resend", "rcpt-1", "--key", "rcpt-1-again", "--accept-duplicate-risk") // (b)
		send("late-2", toC, parcel)                                                   // (c), within the window
		send("lost-2", toD, tomorrow)                                                 // the positive case's twin
		e.run("drain")
		advanceSim(t, sim, 20*time.Minute)
		send("late-3", toC, parcel) // (c), 20 minutes on at Twilio: outside the 15-minute window
		e.run("drain")
		sid := map[string]string{}
		id := map[string]string{}
		for _, key := range []string{"order-2", "rcpt-1-again", "late-2", "late-3", "lost-2"} {
			m := e.get(key)
			if m.State != state.Sent || !strings.HasPrefix(m.ProviderID, "SM") {
				t.Fatalf("%s: %s, provider id %q; want sent", key, m.State, m.ProviderID)
			}
			sid[key], id[key] = m.ProviderID, m.ID
		}
		for _, key := range []string{"order-1", "rcpt-1", "late-1", "lost-1"} {
			id[key] = e.get(key).ID
		}
		ds := deliveries(t, sim)
		var lostSID string
		at := map[string]time.Time{}
		for _, d := range ds {
			if d.To == toD && d.ID != sid["lost-2"] {
				lostSID = d.ID // the message lost-1's create made
			}
			at[d.ID] = d.At
		}
		if len(ds) != 6 || lostSID == "" || at[sid["late-3"]].Sub(at[sid["late-2"]]) < 20*time.Minute {
			t.Fatalf("deliveries %+v: want 6 (none for the refused creates), lost-1's among them, late-3 20m after late-2", ds)
		}

		var out reconcileJSON
		e.jsonOut(0, &out, "reconcile")
		changed, _ := out.summary()
		if !slices.Equal(changed, []string{"lost-1 unknown->sent"}) {
			t.Errorf("changed %v, want lost-1 settled alone", changed)
		}
		notes := map[string]string{}
		for _, l := range out.Unresolved {
			notes[l.Key] = l.Note
		}
		owned := func(key string) string { return sid[key] + " (owned by " + key + " / " + id[key] + ")" }
		for key, want := range map[string][]string{
			"order-1": {"no provider id, and the provider lists 1 message that matches it (near ", owned("order-2"),
				"it is another row's, not this one's: not settled"},
			"rcpt-1": {"the provider lists 1 message that matches it", sid["rcpt-1-again"] + " (owned by its resend rcpt-1-again / " + id["rcpt-1-again"] + ")",
				"it is another row's, not this one's"},
			"late-1": {"the provider lists 1 message that matches it", owned("late-2"), "it is another row's, not this one's"},
		} {
			for _, w := range want {
				if !strings.Contains(notes[key], w) {
					t.Errorf("%s's note %q lacks %q", key, notes[key], w)
				}
			}
		}
		if len(notes) != 3 || strings.Contains(notes["late-1"], sid["late-3"]) {
			t.Errorf("unresolved %q: want order-1, rcpt-1 and late-1, and late-3's message (outside the window) not listed", notes)
		}
		for _, key := range []string{"order-1", "rcpt-1", "late-1"} {
			if m := e.get(key); m.State != state.Unknown || m.ProviderID != "" {
				t.Errorf("%s: %s, provider id %q; want unknown without a SID", key, m.State, m.ProviderID)
			}
		}
		m := e.get("lost-1")
		h := e.history(m.ID)
		if m.State != state.Sent || m.ProviderID != lostSID {
			t.Errorf("lost-1: %s with %q, want sent with the SID its create made, %s", m.State, m.ProviderID, lostSID)
		} else if last := h[len(h)-1]; last.Source != "reconcile" || last.Detail != fmt.Sprintf(
			`provider search (no provider id): one message matches it that no other row owns, %s, status "sent"; the provider also lists %s`,
			lostSID, owned("lost-2")) {
			t.Errorf("lost-1's last history entry %+v", last)
		}

		// stuck shows why each is left, as reconcile said it.
		var rows []stuckNoteJSON
		e.jsonOut(0, &rows, "stuck", "--older-than", "0s")
		got := map[string]string{}
		for _, r := range rows {
			got[r.Key] = r.Note
		}
		if len(got) != 3 || got["order-1"] != notes["order-1"] || got["rcpt-1"] != notes["rcpt-1"] || got["late-1"] != notes["late-1"] {
			t.Errorf("stuck's reconcile_note %q\nwant reconcile's %q", got, notes)
		}
		table, _, code := e.try("stuck", "--older-than", "0s")
		if code != 0 || !strings.Contains(table, "RECONCILE NOTE") ||
			!regexp.MustCompile(`(?m)^`+id["order-1"]+` +order-1 +unknown .*`+regexp.QuoteMeta(owned("order-2"))).MatchString(table) {
			t.Errorf("stuck table (exit %d):\n%s", code, table)
		}

		// A second run finds the same: no change, nothing sent; the rows
		// left keep their state, age and history (the note is on the row).
		before := e.get("order-1")
		hist := len(e.history(before.ID))
		var again reconcileJSON
		e.jsonOut(0, &again, "reconcile")
		if changed, left := again.summary(); len(changed) != 0 || len(left) != 3 {
			t.Errorf("a second run: changed %v, left %v", changed, left)
		}
		e.unchanged(before, hist)
		if n := len(deliveries(t, sim)); n != 6 {
			t.Errorf("%d deliveries after reconcile, want still 6", n)
		}
	})
}
