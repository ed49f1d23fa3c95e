package twilio_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/retry"
)

func TestLookup(t *testing.T) {
	f := newFakeFunc(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/2010-04-01/Accounts/" + accountSID + "/Messages/SMfound.json":
			w.WriteHeader(200)
			w.Write([]byte(`{"sid":"SMfound","status":"undelivered","error_code":30003}`))
		case "/2010-04-01/Accounts/" + accountSID + "/Messages/SMok.json":
			w.WriteHeader(200)
			w.Write([]byte(`{"sid":"SMok","status":"delivered","error_code":null}`))
		case "/2010-04-01/Accounts/" + accountSID + "/Messages/SMbusy.json":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(429)
			w.Write([]byte(twilioError(20429, 429, "Too Many Requests")))
		default:
			w.WriteHeader(404)
			w.Write([]byte(twilioError(20404, 404, "The requested resource was not found")))
		}
	})
	c := f.client()
	st, res := c.Lookup(context.Background(), "SMfound")
	if st != "undelivered" || res.Class != retry.Accepted || res.ProviderID != "SMfound" || res.Code != "30003" {
		t.Errorf("found: %q %+v", st, res)
	}
	st, res = c.Lookup(context.Background(), "SMok")
	if st != "delivered" || res.Code != "" {
		t.Errorf("ok: %q %+v", st, res)
	}
	st, res = c.Lookup(context.Background(), "SMmissing")
	if st != "" || res.Class != retry.Permanent || res.Code != "20404" {
		t.Errorf("missing: %q %+v", st, res)
	}
	_, res = c.Lookup(context.Background(), "SMbusy")
	if res.Class != retry.RateLimited || res.RetryAfter != 3*time.Second {
		t.Errorf("busy: %+v", res)
	}
	_, res = c.Lookup(context.Background(), "../x")
	if res.Class != retry.Permanent || len(f.requests()) != 4 {
		t.Errorf("a sid with a slash: %+v, %d requests", res, len(f.requests()))
	}
	if r := f.requests()[0]; r.Method != http.MethodGet || !strings.HasPrefix(r.Header.Get("Authorization"), "Basic ") {
		t.Errorf("request %+v", r)
	}
}

type listed struct {
	SID            string `json:"sid"`
	Status         string `json:"status"`
	To             string `json:"to"`
	From           string `json:"from"`
	Body           string `json:"body"`
	Direction      string `json:"direction"`
	DateCreated    string `json:"date_created"`
	StatusCallback string `json:"status_callback,omitempty"`
}

func page(msgs []listed, next string) string {
	b, _ := json.Marshal(map[string]any{"messages": msgs, "next_page_uri": next})
	return string(b)
}

func TestFind(t *testing.T) {
	attempt := time.Date(2026, 12, 2, 0, 5, 0, 0, time.UTC) // near midnight: the window spans two days
	at := func(d time.Duration) string { return attempt.Add(d).Format(time.RFC1123Z) }
	m := textMessage()
	ours := listed{"SMours", "delivered", recipient, sender, m.Payload.Text, "outbound-api", at(time.Second), ""}

	for _, tc := range []struct {
		name  string
		pages []string
		sids  []string
	}{
		{"one match", []string{page([]listed{ours}, "")}, []string{"SMours"}},
		{"no message", []string{page(nil, "")}, nil},
		{"another body", []string{page([]listed{func() listed { l := ours; l.Body = "other"; return l }()}, "")}, nil},
		{"inbound from the recipient", []string{page([]listed{func() listed { l := ours; l.Direction = "inbound"; return l }()}, "")}, nil},
		{"from another sender", []string{page([]listed{func() listed { l := ours; l.From = "+15559999999"; return l }()}, "")}, nil},
		{"outside the window", []string{page([]listed{func() listed { l := ours; l.DateCreated = at(-time.Hour); return l }()}, "")}, nil},
		// Both are returned: which one another row owns is reconcile's to
		// tell, through the store.
		{"two alike: both are candidates", []string{page([]listed{ours, func() listed { l := ours; l.SID = "SMtwin"; return l }()}, "")},
			[]string{"SMours", "SMtwin"}},
		{"the match is on the second page", []string{page([]listed{func() listed { l := ours; l.Body = "x"; return l }()}, "/2010-04-01/Accounts/"+accountSID+"/Messages.json?PageToken=p2"), page([]listed{ours}, "")}, []string{"SMours"}},
		{"a callback URL naming us decides over a twin", []string{page([]listed{
			func() listed { l := ours; l.StatusCallback = "https://h/t?msgq_id=" + m.ID; return l }(),
			func() listed {
				l := ours
				l.SID = "SMtwin"
				l.StatusCallback = "https://h/t?msgq_id=OTHERROW"
				return l
			}(),
		}, "")}, []string{"SMours"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			f := newFakeFunc(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				w.Write([]byte(tc.pages[n]))
				n++
			})
			found, res := f.client().Find(context.Background(), m, attempt)
			var sids []string
			for _, c := range found {
				sids = append(sids, c.ID)
				if c.Status != "delivered" || c.Code != "" {
					t.Errorf("candidate %+v: want status delivered and no code", c)
				}
			}
			if !slices.Equal(sids, tc.sids) || res.Class != retry.Accepted {
				t.Fatalf("Find = %q %+v; want %q", sids, res, tc.sids)
			}
			q := f.requests()[0]
			if q.Path != "/2010-04-01/Accounts/"+accountSID+"/Messages.json" {
				t.Errorf("path %s", q.Path)
			}
			for _, want := range []string{"To=%2B15551234567", "From=%2B15550000000", "DateSent%3E=2026-12-01", "DateSent%3C=2026-12-02", "PageSize=1000"} {
				if !strings.Contains(q.RawQuery, want) {
					t.Errorf("query %s lacks %s", q.RawQuery, want)
				}
			}
			if len(tc.pages) > 1 && f.requests()[1].RawQuery != "PageToken=p2" {
				t.Errorf("second page query %q", f.requests()[1].RawQuery)
			}
		})
	}
}

func TestFindFailures(t *testing.T) {
	f := newFake(t, 401, nil, twilioError(20003, 401, "Authenticate"))
	found, res := f.client().Find(context.Background(), textMessage(), now)
	if found != nil || res.Class != retry.Identity {
		t.Errorf("refused credentials: %+v %+v", found, res)
	}
	g := newFake(t, 200, nil, "not json")
	if _, res := g.client().Find(context.Background(), textMessage(), now); res.Class != retry.Ambiguous {
		t.Errorf("unreadable listing: %+v", res)
	}
	// Endless pages: Find gives up rather than reading forever.
	h := newFake(t, 200, nil, page(nil, "/2010-04-01/Accounts/"+accountSID+"/Messages.json?PageToken=again"))
	if _, res := h.client().Find(context.Background(), textMessage(), now); res.Class == retry.Accepted {
		t.Errorf("endless pages: %+v", res)
	}
}
