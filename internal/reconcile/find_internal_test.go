package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// fakeFinder is a provider whose search answers with its fields.
type fakeFinder struct {
	noLookup
	found  []provider.Candidate
	res    provider.Result
	asked  []*provider.Message
	around []time.Time
}

func (f *fakeFinder) Find(_ context.Context, m *provider.Message, around time.Time) ([]provider.Candidate, provider.Result) {
	f.asked, f.around = append(f.asked, m), append(f.around, around)
	return f.found, f.res
}

// twilioWords reads statuses in Twilio's words (StatusMapper).
type twilioWords struct{}

func (twilioWords) StatusState(s string) (state.State, bool) { return twilio.StatusState(s) }

// TestDecideSettlesOnlyOnTheOneFreeCandidate: a search settles a row
// only on the one listed message that no other row owns and no other
// row of the run could be too; anything else leaves it with a note that
// names every candidate and its owner.
func TestDecideSettlesOnlyOnTheOneFreeCandidate(t *testing.T) {
	t.Parallel()
	around := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	row := store.StuckMessage{Message: store.Message{ID: "01JROW", Tenant: "default", Key: "order-1", Identity: "sms-us",
		To: "+15551234567", Channel: store.ChannelSMS, Payload: &store.Payload{Text: "Thanks for your order!"}}}
	cand := func(id, status string) provider.Candidate { return provider.Candidate{ID: id, Status: status} }
	owner := func(pid, id, key string) store.ProviderIDOwner {
		return store.ProviderIDOwner{ProviderID: pid, ID: id, Tenant: "default", Key: key, State: state.Sent}
	}
	rival := store.StuckMessage{Message: store.Message{ID: "01JRIVAL", Key: "order-9", Identity: "sms-us"}}
	var many []provider.Candidate
	for i := range 12 {
		many = append(many, cand(fmt.Sprintf("SM%02d", i), "sent"))
	}
	for _, tc := range []struct {
		name   string
		s      search
		rivals []store.StuckMessage // rows of the run that have the first candidate free too
		p      any
		want   state.State
		pid    string
		text   string // in the why, or the note
	}{
		{"one match, nobody's: settles with its id", search{found: []provider.Candidate{cand("SM1", "sent")}}, nil, nil, state.Sent, "SM1",
			`provider search (no provider id): one message matches it, SM1, status "sent"`},
		{"one failed match, its code verbatim", search{found: []provider.Candidate{{ID: "SM1", Status: "failed", Code: "30003"}}}, nil, nil,
			state.Failed, "SM1", `status "failed", code 30003`},
		{"Twilio's queued is sent in Twilio's words", search{found: []provider.Candidate{cand("SM1", "queued")}}, nil, twilioWords{},
			state.Sent, "SM1", `status "queued"`},
		{"Twilio's canceled is failed", search{found: []provider.Candidate{cand("SM1", "canceled")}}, nil, twilioWords{},
			state.Failed, "SM1", `status "canceled"`},
		{"queued settles nothing in the http API's words", search{found: []provider.Candidate{cand("SM1", "queued")}}, nil, nil,
			state.None, "", `the one message that matches it, SM1, reports "queued", which settles nothing`},
		{"no match", search{}, nil, nil, state.None, "",
			"no provider id, and the provider lists no message that matches it (near 2026-12-02T09:00:00Z): not settled"},
		{"two matches, nobody's", search{found: []provider.Candidate{cand("SM1", "sent"), cand("SM2", "sent")}}, nil, nil, state.None, "",
			"no provider id, and the provider lists 2 messages that match it (near 2026-12-02T09:00:00Z): SM1 (no row), SM2 (no row): which is this one cannot be told"},
		{"the one match is another row's", search{found: []provider.Candidate{cand("SM1", "sent")},
			owners: map[string][]store.ProviderIDOwner{"SM1": {owner("SM1", "01JB", "order-2")}}}, nil, nil, state.None, "",
			"no provider id, and the provider lists 1 message that matches it (near 2026-12-02T09:00:00Z): SM1 (owned by order-2 / 01JB): it is another row's, not this one's: not settled"},
		{"two matches, each another row's (one a collision of two rows)", search{found: []provider.Candidate{cand("SM1", "sent"), cand("SM2", "sent")},
			owners: map[string][]store.ProviderIDOwner{"SM1": {owner("SM1", "01JB", "order-2")}, "SM2": {owner("SM2", "01JC", "a"), owner("SM2", "01JD", "b")}}},
			nil, nil, state.None, "",
			"SM1 (owned by order-2 / 01JB), SM2 (owned by a / 01JC and b / 01JD): each is another row's, so none is this one's: not settled"},
		{"the resend's message and another tenant's are named so", search{found: []provider.Candidate{cand("SM1", "sent"), cand("SM2", "sent")},
			owners: map[string][]store.ProviderIDOwner{
				"SM1": {{ProviderID: "SM1", ID: "01JR", Tenant: "default", Key: "order-1-again", ResendOf: "01JROW"}},
				"SM2": {{ProviderID: "SM2", ID: "01JT", Tenant: "acme", Key: "x-1"}}}}, nil, nil, state.None, "",
			"SM1 (owned by its resend order-1-again / 01JR), SM2 (owned by tenant acme's x-1 / 01JT)"},
		{"one free among owned ones settles on it, naming the others", search{found: []provider.Candidate{cand("SM2", "sent"), cand("SM1", "delivered")},
			owners: map[string][]store.ProviderIDOwner{"SM2": {owner("SM2", "01JB", "order-2")}}}, nil, nil, state.Delivered, "SM1",
			`provider search (no provider id): one message matches it that no other row owns, SM1, status "delivered"; the provider also lists SM2 (owned by order-2 / 01JB)`},
		{"two free among owned ones", search{found: []provider.Candidate{cand("SM1", "sent"), cand("SM2", "sent"), cand("SM3", "sent")},
			owners: map[string][]store.ProviderIDOwner{"SM2": {owner("SM2", "01JB", "order-2")}}}, nil, nil, state.None, "",
			"the provider lists 3 messages that match it (near 2026-12-02T09:00:00Z): SM1 (no row), SM2 (owned by order-2 / 01JB), SM3 (no row): which is this one cannot be told"},
		{"the one free match is another unknown row's one too", search{found: []provider.Candidate{cand("SM1", "sent")}},
			[]store.StuckMessage{row, rival}, nil, state.None, "",
			"SM1 (no row; also matches unknown order-9 / 01JRIVAL): the one no row owns matches another unknown row too, so which is this one cannot be told"},
		{"a long listing is cut", search{found: many}, nil, nil, state.None, "", "SM09 (no row), and 2 more: which is this one cannot be told"},
		{"a failed search", search{failed: "no provider id, and the search failed: rate_limited, HTTP 429, code 20429"}, nil, nil, state.None, "",
			"no provider id, and the search failed: rate_limited, HTTP 429, code 20429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.around = around
			rivals := map[string][]store.StuckMessage{}
			if tc.rivals != nil {
				rivals[rivalKey("sms-us", tc.s.found[0].ID)] = tc.rivals
			}
			o := decide(row, &tc.s, rivals, tc.p)
			text := o.why
			if o.status == state.None {
				text = o.note
			}
			if o.status != tc.want || o.pid != tc.pid || !strings.Contains(text, tc.text) || (o.status == state.None) == (o.note == "") ||
				(o.status == state.None) != (o.why == "") {
				t.Errorf("decide = %+v\nwant %q, %q and %q", o, tc.want, tc.pid, tc.text)
			}
		})
	}
}

// TestSearchForSaysWhyNothingWasListed: a failed search, and a row whose
// content was purged, leave a note; the purged row is not searched for.
func TestSearchForSaysWhyNothingWasListed(t *testing.T) {
	t.Parallel()
	around := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	m := store.StuckMessage{Message: store.Message{ID: "01J", Identity: "sms-us", To: "+15551234567", Channel: store.ChannelSMS,
		Payload: &store.Payload{Text: "Your code is 123456"}}}
	f := &fakeFinder{res: provider.Result{Class: retry.RateLimited, HTTPStatus: 429, Code: "20429"}}
	s, err := searchFor(context.Background(), nil, m, f, around, time.Second)
	if err != nil || s.failed != "no provider id, and the search failed: rate_limited, HTTP 429, code 20429" {
		t.Errorf("a failed search: %+v, %v", s, err)
	}
	if len(f.asked) != 1 || f.asked[0].ID != "01J" || f.asked[0].To != m.To || f.asked[0].Payload.Text != m.Payload.Text || !f.around[0].Equal(around) {
		t.Errorf("asked %+v around %v", f.asked, f.around)
	}
	g := &fakeFinder{found: []provider.Candidate{{ID: "SM1", Status: "sent"}}, res: provider.Result{Class: retry.Accepted}}
	if s, err := searchFor(context.Background(), nil, store.StuckMessage{}, g, around, time.Second); err != nil || s.failed == "" || len(g.asked) != 0 {
		t.Errorf("a purged row: %+v, %v, asked %d times", s, err, len(g.asked))
	}
}

// TestLookUpReadsAProvidersOwnWords: a provider that says what its
// statuses mean (Twilio's queued is a message Twilio took: sent) is read
// in its words, not the http API's.
func TestLookUpReadsAProvidersOwnWords(t *testing.T) {
	t.Parallel()
	m := store.StuckMessage{Message: store.Message{ID: "01J", Identity: "sms-us", ProviderID: "SM1"}}
	ok := provider.Result{Class: retry.Accepted, HTTPStatus: 200}
	for status, want := range map[string]state.State{"queued": state.Sent, "sending": state.Sent, "canceled": state.Failed,
		"delivered": state.Delivered, "received": state.None} {
		provs := map[string]provider.Provider{"sms-us": twilioLookup{&fakeLookup{status: status, res: ok}}}
		if got, _, _ := lookUp(context.Background(), m, provs, time.Second); got != want {
			t.Errorf("Twilio's %q: %q, want %q", status, got, want)
		}
	}
}

type twilioLookup struct{ *fakeLookup }

func (twilioLookup) StatusState(s string) (state.State, bool) { return twilio.StatusState(s) }
