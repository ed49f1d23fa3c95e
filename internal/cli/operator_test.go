package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// The operator commands meet rows in sending and unknown, which only a
// drain that died mid-call or lost an answer leaves behind. These tests
// make such rows through the store's own methods (a claim with a short
// lease, an ambiguous outcome: what drain writes), then run the msgq
// command as a process against the same store, on SQLite and PostgreSQL.
// operator_walk_test.go makes them the real way, with a drain killed by
// SIGKILL.

// opEnv is a store of one kind with a config, msgq pointed at both, and
// the test's own handle on the store.
type opEnv struct {
	*msgqEnv
	st    store.Store
	phone atomic.Int64
}

func newOpEnv(t *testing.T, kind, config string) *opEnv {
	t.Helper()
	dir := t.TempDir()
	b := newBackend(t, kind, dir)
	cfg := filepath.Join(dir, "msgq.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=test-token"}}
	e.run("migrate")
	return &opEnv{msgqEnv: e, st: b.watch(t)}
}

// try runs msgq and returns its stdout, stderr and exit code.
func (e *opEnv) try(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	c := e.cmd(args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("msgq %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// refused runs msgq, requires exit code want, nothing on stdout and one
// line on stderr matching pattern.
func (e *opEnv) refused(want int, pattern string, args ...string) {
	e.t.Helper()
	stdout, stderr, code := e.try(args...)
	if code != want {
		e.t.Fatalf("msgq %s: exit %d, want %d (stderr %q)", strings.Join(args, " "), code, want, stderr)
	}
	if stdout != "" {
		e.t.Errorf("msgq %s: stdout %q, want nothing", strings.Join(args, " "), stdout)
	}
	if strings.Count(stderr, "\n") != 1 || !regexp.MustCompile(pattern).MatchString(stderr) {
		e.t.Errorf("msgq %s: stderr %q, want one line matching %q", strings.Join(args, " "), stderr, pattern)
	}
}

// jsonOut runs msgq with -o json, requires exit code want and decodes its
// stdout into v.
func (e *opEnv) jsonOut(want int, v any, args ...string) {
	e.t.Helper()
	stdout, stderr, code := e.try(append(args, "-o", "json")...)
	if code != want {
		e.t.Fatalf("msgq %s: exit %d, want %d (stderr %q)", strings.Join(args, " "), code, want, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		e.t.Fatalf("msgq %s: %v in %q", strings.Join(args, " "), err, stdout)
	}
}

// seed enqueues one message as msgq send would, with the identity and
// purpose given, to a recipient of its own.
func (e *opEnv) seed(key, identity, purpose string) *store.Message {
	e.t.Helper()
	res, err := e.st.MessageEnqueue(context.Background(), &store.EnqueueParams{
		Tenant: store.DefaultTenant, Key: key, To: fmt.Sprintf("+1555%07d", e.phone.Add(1)), Channel: store.ChannelWhatsApp,
		Identity: identity, Purpose: purpose, TriggerRef: "order:" + key, Lane: store.LaneReply,
		Payload: store.Payload{Text: "your order " + key + " shipped", FallbackTemplate: "order_update"},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Message
}

const testOwner = "host:4242:dead"

// sending seeds a row and claims it (the only queued row: seed the rows
// that stay queued last) with a lease of lease, as a drain does.
func (e *opEnv) sending(key, identity string, lease time.Duration) *store.Message {
	e.t.Helper()
	m := e.seed(key, identity, "")
	cs, err := e.st.MessageClaim(context.Background(), &store.ClaimParams{Owner: testOwner, LeaseFor: lease, Limit: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID != m.ID {
		e.t.Fatalf("claimed %v, want %s alone", cs, key)
	}
	if lease < time.Second {
		// Let it expire, and the takeover margin pass: only then may
		// reconcile or a verdict take it over.
		time.Sleep(2*lease + store.TakeoverMargin)
	}
	return &cs[0].Message
}

// expired seeds one row per key (of the identity named beside it), claims
// them all at once with a lease of 5ms, and waits once for the leases to
// expire and the takeover margin to pass. The rows are returned by key.
func (e *opEnv) expired(keyIdentity ...string) map[string]*store.Message {
	e.t.Helper()
	want := map[string]bool{}
	for i := 0; i < len(keyIdentity); i += 2 {
		want[e.seed(keyIdentity[i], keyIdentity[i+1], "").ID] = true
	}
	const lease = 5 * time.Millisecond
	cs, err := e.st.MessageClaim(context.Background(), &store.ClaimParams{Owner: testOwner, LeaseFor: lease, Limit: len(want)})
	if err != nil {
		e.t.Fatal(err)
	}
	got := map[string]*store.Message{}
	for i := range cs {
		if !want[cs[i].ID] {
			e.t.Fatalf("claimed %s, not one of %v", cs[i].Key, keyIdentity)
		}
		got[cs[i].Key] = &cs[i].Message
	}
	if len(got) != len(want) {
		e.t.Fatalf("claimed %d rows, want %d", len(got), len(want))
	}
	time.Sleep(2*lease + store.TakeoverMargin)
	return got
}

// unknown seeds a row and leaves it unknown, as a drain does when an
// answer is lost: a claim, then an ambiguous outcome with its attempt
// (provider code code, provider id pid when given).
func (e *opEnv) unknown(key, identity, pid, code string) *store.Message {
	e.t.Helper()
	m := e.sending(key, identity, time.Hour)
	now := time.Now()
	after, err := e.st.MessageTransition(context.Background(), &store.TransitionParams{
		ID: m.ID, From: state.Sending, Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain,
		Detail: "test: answer lost", LeaseOwner: testOwner, ProviderID: pid,
		Attempt: &store.Attempt{Number: 1, StartedAt: now, FinishedAt: now, Class: "ambiguous", HTTPStatus: 502, ProviderCode: code},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return after
}

// get reads a row back from the store.
func (e *opEnv) get(ref string) *store.Message {
	e.t.Helper()
	m, err := e.st.MessageGet(context.Background(), store.DefaultTenant, ref)
	if err != nil {
		e.t.Fatalf("%s: %v", ref, err)
	}
	return m
}

func (e *opEnv) history(id string) []store.HistoryEntry {
	e.t.Helper()
	h, err := e.st.MessageHistory(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// unchanged says m is as it was: same state, same update time, same
// history.
func (e *opEnv) unchanged(m *store.Message, historyLen int) {
	e.t.Helper()
	now := e.get(m.ID)
	if now.State != m.State || !now.UpdatedAt.Equal(m.UpdatedAt) || now.Resolution != m.Resolution {
		e.t.Errorf("%s changed: %s at %v (%q), was %s at %v", m.Key, now.State, now.UpdatedAt, now.Resolution, m.State, m.UpdatedAt)
	}
	if n := len(e.history(m.ID)); n != historyLen {
		e.t.Errorf("%s has %d history entries, was %d", m.Key, n, historyLen)
	}
}

func bothStores(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

const simOnly = "identities:\n  shop: {provider: sim}\n  other: {provider: sim}\n"

type stuckJSON struct {
	ID, Key, State, Identity, To string
	LastCode                     string        `json:"last_code"`
	Age                          time.Duration `json:"age_ns"`
	LeaseExpired                 bool          `json:"lease_expired"`
	LeaseUntil                   *time.Time    `json:"lease_until"`
	PastDeadline                 bool          `json:"past_deadline"`
	MaybeSent                    bool          `json:"maybe_sent"`
}

func stuckKeys(rs []stuckJSON) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Key)
	}
	return ks
}

func TestStuckListsWhatMayHaveGoneOut(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e := newOpEnv(t, kind, simOnly)
		expired := e.sending("expired", "shop", 5*time.Millisecond)
		live := e.sending("live", "shop", time.Hour)
		unk := e.unknown("unk", "other", "", "131000")
		e.seed("queued", "shop", "billing")

		// By default (--older-than 1m) only the expired lease: new rows are
		// not stuck yet, but a lease that ran out is stuck at any age.
		var rs []stuckJSON
		e.jsonOut(0, &rs, "stuck")
		if got := stuckKeys(rs); !slices.Equal(got, []string{"expired"}) {
			t.Fatalf("stuck: %v, want [expired]", got)
		}
		if !rs[0].LeaseExpired || rs[0].State != "sending" || rs[0].Age <= 0 || rs[0].To != expired.To {
			t.Errorf("stuck row %+v", rs[0])
		}

		// Everything in flight, oldest first; the queued row never.
		e.jsonOut(0, &rs, "stuck", "--older-than", "0s")
		if got := stuckKeys(rs); !slices.Equal(got, []string{"expired", "live", "unk"}) {
			t.Fatalf("stuck --older-than 0s: %v, want [expired live unk]", got)
		}
		if rs[1].LeaseExpired || rs[1].LeaseUntil == nil || rs[2].LastCode != "131000" || rs[2].State != "unknown" {
			t.Errorf("stuck rows %+v", rs)
		}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--state", "unknown"}, []string{"unk"}},
			{[]string{"--state", "sending"}, []string{"expired", "live"}},
			{[]string{"--identity", "other"}, []string{"unk"}},
			{[]string{"--identity", "nobody"}, nil},
			{[]string{"--purpose", "billing"}, nil}, // the queued row is never stuck
			{[]string{"--limit", "2"}, []string{"expired", "live"}},
		} {
			e.jsonOut(0, &rs, append([]string{"stuck", "--older-than", "0s"}, tc.args...)...)
			if got := stuckKeys(rs); !slices.Equal(got, tc.want) {
				t.Errorf("stuck %v: %v, want %v", tc.args, got, tc.want)
			}
		}

		// The table: masked recipients, the lease, the last code.
		stdout, stderr, code := e.try("stuck", "--older-than", "0s")
		if code != 0 || stderr != "" {
			t.Fatalf("stuck: exit %d, stderr %q", code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 4 || !regexp.MustCompile(`^ID +KEY +STATE +LEASE +IDENTITY +TO +AGE +ATTEMPTS +LAST CODE +RECONCILE NOTE$`).MatchString(lines[0]) {
			t.Fatalf("stuck table:\n%s", stdout)
		}
		for i, re := range []string{
			`^` + expired.ID + ` +expired +sending +expired +shop +\+1555\*+\d\d +\d+s +1 +- +-$`,
			`^` + live.ID + ` +live +sending +live until \S+ +shop +\+1555\*+\d\d +\d+s +1 +- +-$`,
			`^` + unk.ID + ` +unk +unknown +- +other +\+1555\*+\d\d +\d+s +1 +131000 +-$`,
		} {
			if !regexp.MustCompile(re).MatchString(lines[i+1]) {
				t.Errorf("stuck table line %d: %q, want %q", i+1, lines[i+1], re)
			}
		}
		if strings.Contains(stdout, unk.To) {
			t.Errorf("stuck table shows a recipient unmasked:\n%s", stdout)
		}

		// --fail-if-any: the list, then exit 4 for cron.
		stdout, stderr, code = e.try("stuck", "--fail-if-any")
		if code != 4 || !strings.Contains(stdout, expired.ID) ||
			stderr != "msgq: 1 stuck message(s) need a person (--fail-if-any)\n" {
			t.Errorf("stuck --fail-if-any: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		stdout, _, code = e.try("stuck", "--fail-if-any", "--identity", "other")
		if code != 0 || stdout != "" {
			t.Errorf("stuck --fail-if-any with nothing stuck: exit %d, stdout %q", code, stdout)
		}
	})
}

// operatorJSON is what resolve and cancel print with -o json.
type operatorJSON struct {
	ID, Key, State, Reason, Resolution, From string
}

func TestResolveRecordsAVerdictOnlyWhereOneIsNeeded(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e := newOpEnv(t, kind, simOnly)
		u1 := e.unknown("u1", "shop", "", "")
		u2 := e.unknown("u2", "shop", "", "")
		expired := e.sending("expired", "shop", 5*time.Millisecond)
		live := e.sending("live", "shop", time.Hour)

		// unknown -> sent, by key; the verdict, note and who in history.
		stdout, stderr, code := e.try("resolve", "u1", "--as", "sent", "--note", "customer confirmed", "--by", "alice")
		if code != 0 || stderr != "" || !regexp.MustCompile(`(?m)^`+u1.ID+` +u1 +unknown +sent +sent by alice: customer confirmed$`).MatchString(stdout) {
			t.Fatalf("resolve: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		m := e.get("u1")
		h := e.history(u1.ID)
		last := h[len(h)-1]
		if m.State != state.Sent || m.Resolution != "sent by alice: customer confirmed" ||
			last.Event != "resolve(sent)" || last.Source != store.SourceOperator || last.Detail != m.Resolution {
			t.Errorf("after resolve: %s %q, history %+v", m.State, m.Resolution, last)
		}

		// unknown -> failed(resolved), by id, -o json; --by defaults to
		// the operating-system user.
		var out operatorJSON
		e.jsonOut(0, &out, "resolve", u2.ID, "--as", "failed", "--note", "provider support: never accepted")
		who := osUserForTest(t)
		if out.From != "unknown" || out.State != "failed" || out.Reason != "resolved" ||
			out.Resolution != "failed by "+who+": provider support: never accepted" {
			t.Errorf("resolve -o json: %+v", out)
		}

		// A sending row whose lease expired: its drain vanished.
		e.jsonOut(0, &out, "resolve", "expired", "--as", "failed", "--note", "drain host died")
		if out.From != "sending" || out.State != "failed" {
			t.Errorf("resolve of an expired lease: %+v", out)
		}

		// A live lease belongs to its drain: refused, nothing written.
		n := len(e.history(live.ID))
		e.refused(1, `^msgq: cannot resolve live \(`+live.ID+`\): it is sending and its drain's lease is live until \S+, taken over only 5s later \(\S+\): the call may still be answered; wait until then \(msgq stuck lists the row then\)\n$`,
			"resolve", "live", "--as", "failed", "--note", "x")
		e.unchanged(live, n)

		// A verdict is given once.
		n = len(e.history(u1.ID))
		m = e.get("u1")
		e.refused(1, `^msgq: cannot resolve u1 \(`+u1.ID+`\): it is sent; only an unknown or abandoned sending row needs a verdict\n$`,
			"resolve", "u1", "--as", "failed", "--note", "changed my mind")
		e.unchanged(m, n)
		_ = expired
	})
}

// osUserForTest is who msgq names when --by is not given.
func osUserForTest(t *testing.T) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	t.Skip("no operating-system user to compare with")
	return ""
}

type resendJSON struct {
	ID, Key, State, To, Channel, Identity, Purpose, Ref, Lane string
	ResendOf                                                  string         `json:"resend_of"`
	Payload                                                   *store.Payload `json:"payload"`
	Replayed                                                  bool
}

func TestResendOfAnUnknownMessageNeedsTheDuplicateRiskAccepted(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e := newOpEnv(t, kind, simOnly)
		u := e.unknown("u", "shop", "", "")
		s := e.sending("s", "shop", time.Hour)
		n := len(e.history(u.ID))

		e.refused(1, `^msgq: cannot resend u \(`+u.ID+`\): it is unknown; its first send may have reached the phone, so the customer may get it twice; .*--accept-duplicate-risk\n$`,
			"resend", "u", "--key", "u-r2")
		if _, err := e.st.MessageGet(context.Background(), store.DefaultTenant, "u-r2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused resend wrote a row: %v", err)
		}
		// --force is for sent rows; it does not stand in for the risk.
		e.refused(1, `it is unknown`, "resend", "u", "--key", "u-r2", "--force")

		var r resendJSON
		e.jsonOut(0, &r, "resend", "u", "--key", "u-r2", "--accept-duplicate-risk")
		if r.Replayed || r.State != "queued" || r.ResendOf != u.ID || r.Key != "u-r2" || r.To != u.To ||
			r.Channel != u.Channel || r.Identity != u.Identity || r.Purpose != u.Purpose || r.Ref != u.TriggerRef ||
			r.Lane != u.Lane || r.Payload == nil || r.Payload.Text != u.Payload.Text || r.Payload.FallbackTemplate != "order_update" {
			t.Errorf("resend: %+v of %+v", r, u)
		}
		e.unchanged(u, n) // the original is untouched

		// The same resend again is a replay, even without the flag: it
		// returns the row it made and sends nothing new.
		var again resendJSON
		e.jsonOut(0, &again, "resend", "u", "--key", "u-r2")
		if !again.Replayed || again.ID != r.ID {
			t.Errorf("replayed resend: %+v, want %s replayed", again, r.ID)
		}

		// A sending row may be on its way right now: never, whatever the flags.
		e.refused(1, `^msgq: cannot resend s \(`+s.ID+`\): it is sending; a drain may be sending it right now`,
			"resend", "s", "--key", "s-r2", "--accept-duplicate-risk", "--force")
	})
}

func TestCancelRefusesWhatMayHaveGoneOut(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e := newOpEnv(t, kind, simOnly)
		u := e.unknown("u", "shop", "", "")
		s := e.sending("s", "shop", time.Hour)
		q := e.seed("q", "shop", "")
		for _, m := range []*store.Message{u, s} {
			n := len(e.history(m.ID))
			e.refused(1, `^msgq: cannot cancel `+m.Key+` \(`+m.ID+`\): it is `+string(m.State)+`; only a queued row has certainly not gone out\n$`,
				"cancel", m.Key)
			e.unchanged(m, n)
		}
		var out operatorJSON
		e.jsonOut(0, &out, "cancel", q.ID, "--by", "bob", "--note", "duplicate order")
		if out.From != "queued" || out.State != "failed" || out.Reason != "canceled" || out.Resolution != "canceled by bob: duplicate order" {
			t.Errorf("cancel by id: %+v", out)
		}
	})
}

type reconcileJSON struct {
	DryRun  bool `json:"dry_run"`
	Changed []struct {
		ID, Key, Identity, From, To, Reason, Event, Why string
	}
	Unresolved []struct {
		ID, Key, Identity string
		Age               time.Duration `json:"age_ns"`
		Attempts          int
		LastCode          string `json:"last_code"`
		Note              string
	}
}

// changes is the reconcile's changes as "key from->to" and its unresolved
// rows as "key: note", sorted. A note's search time reads "(near T)".
func (r *reconcileJSON) summary() (changed, left []string) {
	for _, c := range r.Changed {
		changed = append(changed, c.Key+" "+c.From+"->"+c.To)
	}
	near := regexp.MustCompile(`\(near [^)]*\)`)
	for _, l := range r.Unresolved {
		left = append(left, l.Key+": "+near.ReplaceAllString(l.Note, "(near T)"))
	}
	slices.Sort(changed)
	slices.Sort(left)
	return changed, left
}

// twilioCreate sends one SMS through the simulator's Twilio Messages API
// (as mixedIdentities' tw) and returns its SID.
func twilioCreate(t *testing.T, sim, to, body string) string {
	t.Helper()
	sid := strings.TrimPrefix(mixedEnvVars[1], "MSGQ_TEST_TWILIO_SID=")
	form := url.Values{"To": {to}, "From": {"+15005550006"}, "Body": {body}}
	req, err := http.NewRequest(http.MethodPost, sim+"/2010-04-01/Accounts/"+sid+"/Messages.json", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(sid, "test-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct{ SID string }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusCreated || !strings.HasPrefix(m.SID, "SM") {
		t.Fatalf("sim twilio create: %d, sid %q, %v", resp.StatusCode, m.SID, err)
	}
	return m.SID
}

func TestReconcileSettlesWhatEvidenceSettlesAndListsTheRest(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		// Rows of every kind: wa, api (http), tw (Twilio SMS: a look-up by
		// SID, and a search without one) and mail (SMTP has nothing to
		// look a mail up by: its rows are always left for a person).
		sim, smtpPort := serveSimSMTP(t, "--status-delay", "1h")
		e := newOpEnv(t, kind, fmt.Sprintf(`identities:
  wa: {provider: whatsapp, base_url: %s, phone_number_id: "1000001", token_env: MSGQ_TEST_TOKEN}
  api: {provider: http, base_url: %s, token_env: MSGQ_TEST_TOKEN}
`, sim, sim)+mixedIdentities(sim, smtpPort, "", "tw", "mail"))
		e.env = append(e.env, mixedEnvVars...)
		// A message the provider has: its id is what a look-up asks for.
		resp, body := simPost(t, sim+"/v1/messages", "pre-1", `{"ref":"pre","to":"+15550009999","channel":"whatsapp","text":"hi"}`)
		var accepted struct{ ID string }
		if err := json.Unmarshal([]byte(body), &accepted); err != nil || resp.StatusCode != 202 || accepted.ID == "" {
			t.Fatalf("sim: %d %s", resp.StatusCode, body)
		}

		// And a message Twilio has: its SID is what a look-up asks for.
		twSID := twilioCreate(t, sim, "+15552009999", "hi")

		// The expired leases, waited out once for all of them.
		exp := e.expired("wa-expired", "wa", "tw-expired", "tw", "mail-expired", "mail", "api-expired", "api", "gone-expired", "gone")
		waExp, twExp, mailExp, apiExp, goneExp := exp["wa-expired"], exp["tw-expired"], exp["mail-expired"], exp["api-expired"], exp["gone-expired"]
		twKnown := e.unknown("tw-known", "tw", twSID, "")
		mailUnk := e.unknown("mail-unknown", "mail", "msgq.x@example.com", "")
		apiKnown := e.unknown("api-known", "api", accepted.ID, "")
		apiLost := e.unknown("api-lost", "api", "msg_nope", "")
		waUnk := e.unknown("wa-unknown", "wa", "wamid.HBgL", "131000")
		live := e.sending("wa-live", "wa", time.Hour)
		rows := []*store.Message{waExp, twExp, mailExp, twKnown, mailUnk, apiExp, goneExp, apiKnown, apiLost, waUnk, live}
		hist := map[string]int{}
		for _, m := range rows {
			hist[m.ID] = len(e.history(m.ID))
		}
		nothingWritten := func(what string) {
			t.Helper()
			for _, m := range rows {
				now := e.get(m.ID)
				if now.State != m.State || len(e.history(m.ID)) != hist[m.ID] {
					t.Errorf("%s wrote: %s is %s", what, m.Key, now.State)
				}
			}
		}

		// Without the token nothing can be looked up: an identity that
		// could be is skipped with one warning, its unknown rows left with
		// a note (expired leases need no token). A dry run: nothing is
		// written.
		noToken := &opEnv{msgqEnv: &msgqEnv{t: t, env: e.env[:2]}, st: e.st}
		out, errs, code := noToken.try("reconcile", "--dry-run", "-o", "json")
		// wa's and mail's providers have no look-up: they need no token here.
		warn := "reconcile: skipping identity api: MSGQ_TEST_TOKEN (token_env) not set in this environment; its unknown rows are not looked up\n"
		twWarn := "reconcile: skipping identity tw: MSGQ_TEST_TWILIO_SID (account_sid_env), MSGQ_TEST_TOKEN (auth_token_env) not set in this environment; its unknown rows are not looked up\n"
		if code != 0 || strings.Count(errs, warn) != 1 || strings.Count(errs, twWarn) != 1 || strings.Count(errs, "skipping") != 2 {
			t.Errorf("reconcile without a token: exit %d, stderr %q, want one warning each, for api and tw", code, errs)
		}
		if !strings.Contains(out, "identity api's token is not set here: not looked up") ||
			!strings.Contains(out, "identity tw's token is not set here: not looked up") {
			t.Errorf("reconcile without a token: %s", out)
		}
		nothingWritten("reconcile without a token")

		wantChanged := []string{
			"api-expired sending->queued",
			"api-known unknown->sent",
			"gone-expired sending->unknown",
			"mail-expired sending->unknown",
			"tw-expired sending->unknown",
			"tw-known unknown->sent",
			"wa-expired sending->unknown",
		}
		wantLeft := []string{
			"api-lost: look-up failed: permanent, HTTP 404, code not_found",
			"gone-expired: its drain vanished mid-call: the call may have reached the phone; no provider id to look up",
			"mail-expired: its drain vanished mid-call: the call may have reached the phone; no provider id to look up",
			"mail-unknown: identity mail's provider cannot look a message up",
			"tw-expired: its drain vanished mid-call: the call may have reached the phone; no provider id, and the provider lists no message that matches it (near T): not settled",
			"wa-expired: its drain vanished mid-call: the call may have reached the phone; no provider id to look up",
			"wa-unknown: identity wa's provider cannot look a message up",
		}

		var dry reconcileJSON
		e.jsonOut(0, &dry, "reconcile", "--dry-run")
		changed, left := dry.summary()
		if !dry.DryRun || !slices.Equal(changed, wantChanged) || !slices.Equal(left, wantLeft) {
			t.Fatalf("reconcile --dry-run:\nchanged %q\nwant    %q\nleft %q\nwant %q", changed, wantChanged, left, wantLeft)
		}
		nothingWritten("reconcile --dry-run")

		var got reconcileJSON
		e.jsonOut(4, &got, "reconcile", "--fail-if-unresolved")
		changed, left = got.summary()
		if got.DryRun || !slices.Equal(changed, wantChanged) || !slices.Equal(left, wantLeft) {
			t.Fatalf("reconcile:\nchanged %q\nwant    %q\nleft %q\nwant %q", changed, wantChanged, left, wantLeft)
		}
		for _, l := range got.Unresolved {
			if l.Key == "wa-unknown" && (l.LastCode != "131000" || l.Attempts != 1 || l.Age <= 0 || l.Identity != "wa") {
				t.Errorf("unresolved %+v", l)
			}
		}

		// What the store holds now, and why, in each row's history.
		for _, tc := range []struct {
			m      *store.Message
			state  state.State
			event  string
			detail string
		}{
			{waExp, state.Unknown, "lease_expired", "lease of " + testOwner + " expired at .*; identity wa's provider does not deduplicate by key, so the call may have reached the phone"},
			{twExp, state.Unknown, "lease_expired", "identity tw's provider does not deduplicate by key"},
			{mailExp, state.Unknown, "lease_expired", "identity mail's provider does not deduplicate by key"},
			{twKnown, state.Sent, "evidence(sent)", `provider look-up of ` + twSID + `: status "sent"`},
			{apiExp, state.Queued, "lease_requeue", "identity api's provider deduplicates by key: queued again with the same key \\(maybe_sent\\)"},
			{goneExp, state.Unknown, "lease_expired", "identity gone is not in the config: treated as not deduplicating by key"},
			{apiKnown, state.Sent, "evidence(sent)", `provider look-up of ` + accepted.ID + `: status "accepted"`},
		} {
			m := e.get(tc.m.ID)
			h := e.history(m.ID)
			last := h[len(h)-1]
			if m.State != tc.state || last.Event != tc.event || last.Source != store.SourceReconcile ||
				!regexp.MustCompile(tc.detail).MatchString(last.Detail) {
				t.Errorf("%s: %s, last history %+v", m.Key, m.State, last)
			}
		}
		if m := e.get(apiExp.ID); !m.MaybeSent || m.LeaseOwner != "" {
			t.Errorf("requeued row: maybe_sent %v, lease %q", m.MaybeSent, m.LeaseOwner)
		}
		for _, m := range []*store.Message{apiLost, waUnk, mailUnk, live} {
			e.unchanged(m, hist[m.ID])
		}

		// Again: nothing left to change; the same rows wait for a person.
		stdout, stderr, code := e.try("reconcile")
		if code != 0 || stderr != "reconcile: changed 0, left for a person 7\n" ||
			!strings.HasPrefix(stdout, "CHANGED\nnone\n\nFOR A PERSON") || strings.Count(stdout, "\n") != 12 {
			t.Errorf("second reconcile: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
		}
		if !regexp.MustCompile(`(?m)^` + waUnk.ID + ` +wa-unknown +wa +\d+s +1 +131000 +identity wa's provider cannot look a message up$`).MatchString(stdout) {
			t.Errorf("second reconcile's table:\n%s", stdout)
		}
		// --identity narrows it.
		e.jsonOut(0, &got, "reconcile", "--identity", "api")
		if _, left := got.summary(); len(got.Changed) != 0 || !slices.Equal(left, wantLeft[:1]) {
			t.Errorf("reconcile --identity api: %+v", got)
		}
	})
}
