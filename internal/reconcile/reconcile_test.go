package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/reconcile"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

var ctx = context.Background()

// env is a real SQLite store on a settable clock and a real simulator
// server, reached over HTTP by the http API and WhatsApp providers.
type env struct {
	t   *testing.T
	st  store.Store
	clk *storetest.Clock
	url string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := storetest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sm := sim.New(sim.DefaultConfig())
	srv := httptest.NewServer(sm.Handler())
	t.Cleanup(func() { srv.Close(); sm.Close() })
	return &env{t: t, st: st, clk: clk, url: srv.URL}
}

// identities: api (http API: deduplicates by key, looks up), wa
// (WhatsApp: neither), and, when tokenless is set, api2 whose token is
// not set in this process.
func (e *env) identities(tokenless bool) map[string]*reconcile.Identity {
	api := func() provider.Provider { return httpapi.New(httpapi.Config{BaseURL: e.url, Token: "test"}) }
	wa := func() provider.Provider {
		return whatsapp.New(whatsapp.Config{BaseURL: e.url, PhoneNumberID: "1000001", Token: "test"})
	}
	none := func() []string { return nil }
	ids := map[string]*reconcile.Identity{
		"api": {Kind: api, Missing: none, Provider: func() (provider.Provider, error) { return api(), nil }},
		"wa":  {Kind: wa, Missing: none, Provider: func() (provider.Provider, error) { return wa(), nil }},
	}
	if tokenless {
		ids["api2"] = &reconcile.Identity{Kind: api, Missing: func() []string { return []string{"API2_TOKEN (token_env)"} },
			Provider: func() (provider.Provider, error) { return nil, fmt.Errorf("api2 built without its token") }}
	}
	return ids
}

// accepted sends one message to the simulator and returns the provider
// id it answered: a message a look-up finds.
func (e *env) accepted(key string) string {
	e.t.Helper()
	p := httpapi.New(httpapi.Config{BaseURL: e.url, Token: "test"})
	r := p.Send(ctx, &provider.Message{ID: "01PRE", Key: key, To: "+15550009999", Channel: store.ChannelWhatsApp,
		Payload: store.Payload{Text: "hi"}})
	if r.Class != retry.Accepted || r.ProviderID == "" {
		e.t.Fatalf("sim send: %+v", r)
	}
	return r.ProviderID
}

// claimed enqueues key for identity and claims it (the only queued row)
// for lease.
func (e *env) claimed(key, identity string, lease time.Duration) *store.Message {
	e.t.Helper()
	p := storetest.Params(key)
	p.Identity = identity
	if _, err := e.st.MessageEnqueue(ctx, &p); err != nil {
		e.t.Fatal(err)
	}
	cs, err := e.st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: lease, Limit: 1})
	if err != nil || len(cs) != 1 || cs[0].Key != key {
		e.t.Fatalf("claim %s: %v %+v", key, err, cs)
	}
	return &cs[0].Message
}

// unknown leaves key unknown, as a drain does when an answer is lost,
// with provider id pid.
func (e *env) unknown(key, identity, pid string) *store.Message {
	e.t.Helper()
	m := e.claimed(key, identity, time.Hour)
	now := e.clk.Now()
	after, err := e.st.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sending,
		Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain, Detail: "test: answer lost",
		LeaseOwner: "drain-1", ProviderID: pid,
		Attempt: &store.Attempt{Number: 1, StartedAt: now, FinishedAt: now, Class: "ambiguous", HTTPStatus: 502}})
	if err != nil {
		e.t.Fatal(err)
	}
	return after
}

func (e *env) get(id string) *store.Message {
	e.t.Helper()
	m, err := e.st.MessageGet(ctx, "", id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func summary(r reconcile.Result) (changed, left []string) {
	for _, c := range r.Changed {
		changed = append(changed, c.Key+" "+string(c.From)+"->"+string(c.To))
	}
	for _, l := range r.Unresolved {
		left = append(left, l.Key+": "+l.Note)
	}
	slices.Sort(changed)
	slices.Sort(left)
	return changed, left
}

// TestRunSettlesLeasesAndLookUpsAndListsTheRest runs reconcile without
// cobra against a real store and the simulator: expired leases are queued
// again (a provider that deduplicates) or made unknown; unknown rows with
// a provider id are looked up; what is left says why. A dry run reports
// the same and writes nothing.
func TestRunSettlesLeasesAndLookUpsAndListsTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pid := e.accepted("pre-1")
	apiExp := e.claimed("api-expired", "api", 10*time.Second)
	waExp := e.claimed("wa-expired", "wa", 10*time.Second)
	goneExp := e.claimed("gone-expired", "gone", 10*time.Second)
	apiKnown := e.unknown("api-known", "api", pid)
	apiLost := e.unknown("api-lost", "api", "msg_nope")
	waUnk := e.unknown("wa-unknown", "wa", "wamid.HBgL")
	api2 := e.unknown("api2-unknown", "api2", pid)
	live := e.claimed("wa-live", "wa", time.Hour)
	e.clk.Advance(10*time.Second + store.TakeoverMargin)
	rows := []*store.Message{apiExp, waExp, goneExp, apiKnown, apiLost, waUnk, api2, live}

	wantChanged := []string{
		"api-expired sending->queued",
		"api-known unknown->sent",
		"gone-expired sending->unknown",
		"wa-expired sending->unknown",
	}
	wantLeft := []string{
		"api-lost: look-up failed: permanent, HTTP 404, code not_found",
		"api2-unknown: identity api2's token is not set here: not looked up",
		"gone-expired: its drain vanished mid-call: the call may have reached the phone; no provider id to look up",
		"wa-expired: its drain vanished mid-call: the call may have reached the phone; no provider id to look up",
		"wa-unknown: identity wa's provider cannot look a message up",
	}
	run := func(dry bool) (reconcile.Result, []reconcile.Skipped, string) {
		t.Helper()
		var notes bytes.Buffer
		var skipped []reconcile.Skipped
		res, err := reconcile.Run(ctx, reconcile.Config{Store: e.st, Tenant: store.DefaultTenant, Limit: 100,
			CallTimeout: 5 * time.Second, DryRun: dry, Identities: e.identities(true), Notes: &notes,
			OnSkipped: func(s []reconcile.Skipped) { skipped = append(skipped, s...) }})
		if err != nil {
			t.Fatalf("Run(dry run %v): %v", dry, err)
		}
		if res.DryRun != dry {
			t.Errorf("Result.DryRun = %v", res.DryRun)
		}
		return res, skipped, notes.String()
	}

	res, skipped, _ := run(true)
	changed, left := summary(res)
	if !slices.Equal(changed, wantChanged) || !slices.Equal(left, wantLeft) {
		t.Errorf("dry run:\nchanged %q\nwant    %q\nleft %q\nwant %q", changed, wantChanged, left, wantLeft)
	}
	if len(skipped) != 1 || skipped[0].Name != "api2" || !slices.Equal(skipped[0].Missing, []string{"API2_TOKEN (token_env)"}) {
		t.Errorf("skipped: %+v, want api2 alone", skipped)
	}
	for _, m := range rows {
		if now := e.get(m.ID); now.State != m.State {
			t.Errorf("the dry run wrote: %s is %s, was %s", m.Key, now.State, m.State)
		}
	}

	res, _, _ = run(false)
	changed, left = summary(res)
	if !slices.Equal(changed, wantChanged) || !slices.Equal(left, wantLeft) {
		t.Errorf("run:\nchanged %q\nwant    %q\nleft %q\nwant %q", changed, wantChanged, left, wantLeft)
	}
	for _, tc := range []struct {
		m         *store.Message
		want      state.State
		maybeSent bool
	}{
		{apiExp, state.Queued, true}, {waExp, state.Unknown, false}, {goneExp, state.Unknown, false},
		{apiKnown, state.Sent, false}, {apiLost, state.Unknown, false}, {waUnk, state.Unknown, false},
		{api2, state.Unknown, false}, {live, state.Sending, false},
	} {
		now := e.get(tc.m.ID)
		if now.State != tc.want || now.MaybeSent != tc.maybeSent {
			t.Errorf("%s: %s (maybe_sent %v), want %s (%v)", tc.m.Key, now.State, now.MaybeSent, tc.want, tc.maybeSent)
		}
	}
	hist, err := e.st.MessageHistory(ctx, apiKnown.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1]
	if last.Source != store.SourceReconcile || !strings.Contains(last.Detail, "provider look-up of "+pid+`: status "accepted"`) {
		t.Errorf("api-known's last history entry: %+v", last)
	}

	// A second run finds nothing more to change: the queued row is for a
	// drain, the rest for a person.
	res, _, _ = run(false)
	if changed, _ := summary(res); len(changed) != 0 {
		t.Errorf("second run changed %q", changed)
	}
}

// TestRunWritesLeasesInBatches: more expired leases than one transaction
// takes are all written, and --limit's note says when rows were left for
// the next run.
func TestRunWritesLeasesInBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 300 // more than one batch
	for i := range n {
		p := storetest.Params(fmt.Sprintf("k-%03d", i))
		p.Identity = "api"
		p.To = fmt.Sprintf("+1555%07d", i)
		if _, err := e.st.MessageEnqueue(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := e.st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: 10 * time.Second, Limit: n})
	if err != nil || len(cs) != n {
		t.Fatalf("claimed %d: %v", len(cs), err)
	}
	e.clk.Advance(10*time.Second + store.TakeoverMargin)

	var notes bytes.Buffer
	cfg := reconcile.Config{Store: e.st, Tenant: store.DefaultTenant, Limit: n - 10, CallTimeout: 5 * time.Second,
		Identities: e.identities(false), Notes: &notes}
	res, err := reconcile.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != n-10 || len(res.Unresolved) != 0 {
		t.Errorf("changed %d, left %d; want %d, 0", len(res.Changed), len(res.Unresolved), n-10)
	}
	if !strings.Contains(notes.String(), fmt.Sprintf("took the oldest %d sending rows (--limit)", n-10)) {
		t.Errorf("notes: %q", notes.String())
	}
	res, err = reconcile.Run(ctx, cfg)
	if err != nil || len(res.Changed) != 10 {
		t.Fatalf("second run: changed %d, %v; want the 10 left", len(res.Changed), err)
	}
	queued, err := e.st.MessageList(ctx, &store.ListParams{State: state.Queued, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != n {
		t.Errorf("%d rows queued again, want %d", len(queued), n)
	}
	for _, m := range queued {
		if !m.MaybeSent {
			t.Errorf("%s queued again without maybe_sent", m.Key)
			break
		}
	}
}
