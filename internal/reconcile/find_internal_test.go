package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// fakeFinder is a provider whose search answers with its fields, in the
// http API's words unless mapped.
type fakeFinder struct {
	noLookup
	id, status string
	matches    int
	res        provider.Result
	asked      []*provider.Message
	around     []time.Time
}

func (f *fakeFinder) Find(_ context.Context, m *provider.Message, around time.Time) (string, string, int, provider.Result) {
	f.asked, f.around = append(f.asked, m), append(f.around, around)
	return f.id, f.status, f.matches, f.res
}

// twilioWords is a finder whose statuses are Twilio's (StatusMapper).
type twilioWords struct{ *fakeFinder }

func (twilioWords) StatusState(s string) (state.State, bool) { return twilio.StatusState(s) }

func TestFindOneSettlesOnlyAUniqueMatch(t *testing.T) {
	t.Parallel()
	ok := provider.Result{Class: retry.Accepted, HTTPStatus: 200}
	around := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		f         Finder
		want      state.State
		pid       string
		whyOrNote string
	}{
		{"one match settles, with its id", &fakeFinder{id: "SM1", status: "sent", matches: 1, res: ok}, state.Sent, "SM1",
			`provider search (no provider id): one message matches it, SM1, status "sent"`},
		{"one failed match, its code verbatim", &fakeFinder{id: "SM1", status: "failed", matches: 1,
			res: provider.Result{Class: retry.Accepted, HTTPStatus: 200, Code: "30003"}}, state.Failed, "SM1", `status "failed", code 30003`},
		{"Twilio's queued is sent in Twilio's words", twilioWords{&fakeFinder{id: "SM1", status: "queued", matches: 1, res: ok}}, state.Sent, "SM1",
			`status "queued"`},
		{"Twilio's canceled is failed", twilioWords{&fakeFinder{id: "SM1", status: "canceled", matches: 1, res: ok}}, state.Failed, "SM1",
			`status "canceled"`},
		{"queued settles nothing in the http API's words", &fakeFinder{id: "SM1", status: "queued", matches: 1, res: ok}, state.None, "",
			`the one message that matches it, SM1, reports "queued", which settles nothing`},
		{"no match", &fakeFinder{res: ok}, state.None, "",
			"no provider id, and the provider lists no message that matches it (near 2026-12-02T09:00:00Z): not settled"},
		{"two matches", &fakeFinder{matches: 2, res: ok}, state.None, "",
			"no provider id, and the provider lists 2 messages that match it (near 2026-12-02T09:00:00Z): which is this one cannot be told"},
		{"a failed search", &fakeFinder{res: provider.Result{Class: retry.RateLimited, HTTPStatus: 429, Code: "20429"}}, state.None, "",
			"no provider id, and the search failed: rate_limited, HTTP 429, code 20429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := store.StuckMessage{Message: store.Message{ID: "01J", Identity: "sms-us", To: "+15551234567", Channel: store.ChannelSMS,
				Payload: &store.Payload{Text: "Your code is 123456"}}}
			got, pid, why, note := findOne(context.Background(), m, tc.f, around, time.Second)
			text := why
			if got == state.None {
				text = note
			}
			if got != tc.want || pid != tc.pid || !strings.Contains(text, tc.whyOrNote) || (got == state.None) == (note == "") {
				t.Errorf("findOne = %q, %q, %q, %q; want %q, %q and %q", got, pid, why, note, tc.want, tc.pid, tc.whyOrNote)
			}
			ff, _ := tc.f.(*fakeFinder)
			if w, isTw := tc.f.(twilioWords); isTw {
				ff = w.fakeFinder
			}
			if len(ff.asked) != 1 || ff.asked[0].ID != "01J" || ff.asked[0].To != m.To || ff.asked[0].Payload.Text != m.Payload.Text ||
				!ff.around[0].Equal(around) {
				t.Errorf("asked %+v around %v", ff.asked, ff.around)
			}
		})
	}
	// A row whose content is gone cannot be searched for.
	f := &fakeFinder{id: "SM1", status: "sent", matches: 1, res: ok}
	if got, _, _, note := findOne(context.Background(), store.StuckMessage{}, f, around, time.Second); got != state.None || note == "" || len(f.asked) != 0 {
		t.Errorf("a purged row: %q, %q, asked %d times", got, note, len(f.asked))
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
