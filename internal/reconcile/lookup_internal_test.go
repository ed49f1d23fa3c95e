package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// fakeLookup is a provider whose look-up answers status with res.
type fakeLookup struct {
	status string
	res    provider.Result
	asked  []string
}

func (f *fakeLookup) Send(context.Context, *provider.Message) provider.Result {
	panic("reconcile never sends")
}
func (f *fakeLookup) Idempotent() bool { return true }
func (f *fakeLookup) Lookup(_ context.Context, id string) (string, provider.Result) {
	f.asked = append(f.asked, id)
	return f.status, f.res
}

// noLookup is a provider without a look-up (WhatsApp's Cloud API).
type noLookup struct{}

func (noLookup) Send(context.Context, *provider.Message) provider.Result {
	panic("reconcile never sends")
}
func (noLookup) Idempotent() bool { return false }

func TestLookUpTurnsAProviderStatusIntoEvidenceOrANote(t *testing.T) {
	t.Parallel()
	ok := provider.Result{Class: retry.Accepted, HTTPStatus: 200}
	for _, tc := range []struct {
		name       string
		pid        string
		prov       provider.Provider
		want       state.State
		whyOrNote  string
		wantAsking bool
	}{
		{"accepted is sent", "msg_1", &fakeLookup{status: "accepted", res: ok}, state.Sent, `provider look-up of msg_1: status "accepted"`, true},
		{"delivered", "msg_1", &fakeLookup{status: "delivered", res: ok}, state.Delivered, `status "delivered"`, true},
		{"read, any case", "msg_1", &fakeLookup{status: "READ", res: ok}, state.Read, `status "READ"`, true},
		{"undelivered is failed, its code verbatim", "msg_1",
			&fakeLookup{status: "undelivered", res: provider.Result{Class: retry.Accepted, HTTPStatus: 200, Code: "30003"}},
			state.Failed, `status "undelivered", code 30003`, true},
		{"a status that settles nothing", "msg_1", &fakeLookup{status: "queued", res: ok}, state.None,
			`the provider reports "queued", which settles nothing`, true},
		{"a failed look-up", "msg_1", &fakeLookup{res: provider.Result{Class: retry.Transient, HTTPStatus: 503, Code: "unavailable"}},
			state.None, "look-up failed: transient, HTTP 503, code unavailable", true},
		{"a look-up that got no answer", "msg_1", &fakeLookup{res: provider.Result{Class: retry.Ambiguous, RawError: "read: connection\nreset"}},
			state.None, "look-up failed: ambiguous, read: connection reset", true}, // one line
		{"no provider id", "", &fakeLookup{status: "delivered", res: ok}, state.None, "no provider id to look up", false},
		{"a provider without look-ups", "wamid.1", noLookup{}, state.None, "identity shop's provider cannot look a message up", false},
		{"an identity not configured", "msg_1", nil, state.None, "identity shop is not in the config: no provider to ask", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			provs := map[string]provider.Provider{}
			if tc.prov != nil {
				provs["shop"] = tc.prov
			}
			m := store.StuckMessage{Message: store.Message{ID: "01J", Identity: "shop", ProviderID: tc.pid}}
			got, why, note := lookUp(context.Background(), m, provs, time.Second)
			text := why
			if got == state.None {
				text = note
			}
			if got != tc.want || !strings.Contains(text, tc.whyOrNote) {
				t.Errorf("lookUp = %q, %q, %q; want %q and %q", got, why, note, tc.want, tc.whyOrNote)
			}
			if f, ok := tc.prov.(*fakeLookup); ok && (len(f.asked) > 0) != tc.wantAsking {
				t.Errorf("asked %v", f.asked)
			}
		})
	}
}
