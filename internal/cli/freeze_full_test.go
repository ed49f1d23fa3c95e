//go:build full

package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// simCall is one entry of the simulator's call log (GET /calls).
type simCall struct {
	Key, Ref, To, API, Result string
	At                        time.Time
}

func simCalls(t *testing.T, base string) []simCall {
	t.Helper()
	resp, err := http.Get(base + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cs []simCall
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestAFrozenDrainWakesUpToGiveRowsBackNeverToCall is issue 12's
// reproduction, on both stores, with real processes: a `msgq drain
// --follow` with four paced identities (wa: WhatsApp, tw: Twilio SMS and
// mail: SMTP email, none with key dedupe; sm: the sim's http API, which
// deduplicates by key) is frozen with SIGSTOP while it holds leases, some
// rows waiting for their pacing slot and some mid-call. Past its lease
// and the takeover margin, reconcile takes the rows over (wa, mail:
// unknown; tw: unknown, or settled sent by Twilio's search when its call
// had reached the simulator; sm: queued, maybe_sent), an operator cancels a
// requeued row, and resolves an unknown row as failed and resends it under
// a new key. Then SIGCONT. The simulator's call log is the oracle:
//   - no call after the resume for a row the frozen drain held, except a
//     later claim's own (recorded as its attempt: reconcile queued the sm
//     rows again, and the woken drain may claim them anew);
//   - the canceled row never reaches the phone, no recipient gets a
//     message twice (the resent one included), and every recipient is
//     reached but the canceled one's and those of the uncalled rows left
//     unknown (all but the resent one);
//   - every row the frozen drain had not called yet gets a history entry
//     saying it was given back without a call, and every call it had made
//     has its attempt on the row (the late answer is evidence, not lost).
//
// writableNow says whether another process could write to the store now:
// always on PostgreSQL (row locks, not a file lock); on SQLite, whether a
// write transaction can begin within a moment.
func writableNow(t *testing.T, e *msgqEnv) bool {
	t.Helper()
	var path string
	for _, kv := range e.env {
		if v, ok := strings.CutPrefix(kv, "MSGQ_STORE=sqlite:"); ok {
			path = v
		}
	}
	if path == "" {
		return true
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(300)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		return false
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	return true
}

func TestAFrozenDrainWakesUpToGiveRowsBackNeverToCall(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			frozenDrain(t, kind)
		})
	}
}

func frozenDrain(t *testing.T, kind string) {
	// 50 per identity: at 3/s, seventeen seconds of calls to freeze in.
	// (With 30, a loaded CI machine's ten tries, 1.7 s apart, once ran
	// past the last call without a right moment.)
	const n = 200
	ctx := context.Background()
	// Latency longer than the pacing interval (3/s and 10% headroom:
	// 367 ms): at any moment a call of each identity is in flight, so the
	// freeze catches some mid-call (their answers come back late), while
	// other claimed rows wait for their slots.
	sim, smtpPort := serveSimSMTP(t, "--latency", "600ms")
	e := newOpEnv(t, kind, fmt.Sprintf(`default_identity: wa
identities:
  wa:
    provider: whatsapp
    base_url: %[1]s
    phone_number_id: "1000001"
    token_env: MSGQ_TEST_TOKEN
    rate: 3/s
  sm:
    provider: sim
    base_url: %[1]s
    rate: 3/s
%[2]s`, sim, mixedIdentities(sim, smtpPort, "    rate: 3/s\n", "tw", "mail")))
	e.env = append(e.env, mixedEnvVars...)
	var lines strings.Builder
	for i := range n {
		switch id := []string{"wa", "sm", "tw", "mail"}[i%4]; id {
		case "tw", "mail":
			lines.WriteString(mixedLine(fmt.Sprintf("frz-%02d", i), id, i, fmt.Sprintf("hello %d", i)))
		default:
			fmt.Fprintf(&lines, `{"key":"frz-%02d","to":"+1555%07d","identity":"%s","template":"order_update","params":["%d"]}`+"\n", i, i, id, i)
		}
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, in, lines.String())
	e.run("send", "--file", in)

	// Four rows of each identity at a time, as two identities had with 8.
	d := startDrain(t, e.msgqEnv, "--follow", "--concurrency", "16", "--lease", "12s", "--call-timeout", "2s")
	pid := d.cmd.Process.Pid
	// The 2 s, but counted from the drain's first calls: on a
	// loaded machine the process may take a while to start.
	for deadline := time.Now().Add(30 * time.Second); len(simCalls(t, sim)) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the drain made no calls in 30s: %s", d.stderr.String())
		}
	}
	time.Sleep(2 * time.Second)
	// Freeze the drain at a moment it holds rows of both identities it
	// has not called yet (waiting for their slots) and some it has. The
	// calls in flight are decided within the sim's latency, so the call
	// log tells them apart a second later. If the moment was wrong, the
	// drain goes on (a second's freeze leaves its 12 s leases valid) and
	// is frozen again a little later.
	var (
		stopped     time.Time
		held        map[string]store.Message
		last        time.Time
		perIdentity map[string]int
	)
	for try := 0; ; try++ {
		if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped = time.Now()
		// What the frozen drain holds: rows in sending under its leases.
		sending, err := e.st.MessageList(ctx, &store.ListParams{State: state.Sending, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		held, last, perIdentity = map[string]store.Message{}, time.Time{}, map[string]int{}
		for _, m := range sending {
			if !strings.Contains(m.LeaseOwner, fmt.Sprintf(":%d:", pid)) {
				t.Fatalf("row %s is leased by %q, not the only drain (pid %d)", m.Key, m.LeaseOwner, pid)
			}
			held[m.ID] = m
			if m.LeaseUntil.After(last) {
				last = *m.LeaseUntil
			}
		}
		time.Sleep(time.Second)
		called := map[string]bool{}
		for _, c := range simCalls(t, sim) {
			called[c.Ref] = true
		}
		uncalled := map[string]int{}
		for id, m := range held {
			perIdentity[m.Identity]++
			if !called[id] {
				uncalled[m.Identity]++
			}
		}
		// A drain frozen inside a SQLite write transaction holds the
		// file's write lock, so no other process can write until it
		// resumes (busy, not unsafe): that moment is wrong too.
		// Every kind held; uncalled rows of both wa and sm (to resolve
		// and cancel), and a call in flight.
		uncalledAll := uncalled["wa"] + uncalled["sm"] + uncalled["tw"] + uncalled["mail"]
		writable := writableNow(t, e.msgqEnv)
		if uncalled["wa"] > 0 && uncalled["sm"] > 0 && perIdentity["tw"] > 0 && perIdentity["mail"] > 0 &&
			len(held) > uncalledAll && writable {
			break
		}
		t.Logf("freeze %d: not the moment (%v held, %v uncalled, store writable %v)", try, perIdentity, uncalled, writable)
		if try == 10 {
			t.Fatalf("eleven freezes, none holding rows of every identity, uncalled ones of wa and sm, and a call in flight (last: %v held, %v uncalled)",
				perIdentity, uncalled)
		}
		if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
	}

	// Past every lease and the takeover margin; reconcile takes over.
	time.Sleep(time.Until(last.Add(store.TakeoverMargin + 300*time.Millisecond)))
	e.run("reconcile")
	calledBefore := map[string]int{} // calls per row before the resume
	for _, c := range simCalls(t, sim) {
		calledBefore[c.Ref]++
	}
	var canceled, resolved string
	for id, h := range held {
		m := e.get(id)
		switch h.Identity {
		case "wa":
			if m.State != state.Unknown {
				t.Errorf("held wa row %s after reconcile: %s, want unknown", h.Key, m.State)
			}
			if resolved == "" && calledBefore[id] == 0 {
				resolved = id
			}
		case "mail":
			// SMTP has nothing to look a mail up by.
			if m.State != state.Unknown {
				t.Errorf("held mail row %s after reconcile: %s, want unknown", h.Key, m.State)
			}
		case "tw":
			// Twilio's search finds the one message a call created, and
			// none for a row never called.
			switch {
			case calledBefore[id] == 0 && m.State != state.Unknown:
				t.Errorf("held tw row %s, never called, after reconcile: %s, want unknown", h.Key, m.State)
			case calledBefore[id] > 0 && m.State != state.Sent && m.State != state.Delivered:
				t.Errorf("held tw row %s, called, after reconcile: %s, want sent or delivered (found by Twilio's search)", h.Key, m.State)
			}
		case "sm":
			if m.State != state.Queued || !m.MaybeSent {
				t.Errorf("held sm row %s after reconcile: %s (maybe_sent %v), want queued, maybe_sent", h.Key, m.State, m.MaybeSent)
			}
			if canceled == "" && calledBefore[id] == 0 {
				canceled = id
			}
		}
	}
	if canceled == "" || resolved == "" {
		t.Fatalf("held %d rows, calls before the resume %v: no uncalled row of each identity to cancel and resolve", len(held), calledBefore)
	}
	// The sm row was queued again flagged maybe_sent (its provider
	// deduplicates by key, and its drain froze mid-claim): cancel says it
	// may have gone out, and the operator accepts that.
	if _, errs, code := e.try("cancel", canceled); code != 1 || !strings.Contains(errs, "--accept-maybe-sent") {
		t.Errorf("cancel of a maybe_sent row without consent: exit %d, %q; want exit 1 naming --accept-maybe-sent", code, errs)
	}
	e.run("cancel", canceled, "--accept-maybe-sent")
	e.run("resolve", resolved, "--as", "failed", "--note", "provider support: never accepted")
	var rs resendJSON
	e.jsonOut(0, &rs, "resend", resolved, "--key", held[resolved].Key+"-r2")

	resumed := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("frozen for %s holding %d rows (%v), %d of them called before", resumed.Sub(stopped).Round(time.Millisecond),
		len(held), perIdentity, len(held)-countZero(held, calledBefore))

	// The drain finishes the queue: nothing queued or sending.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		q, s, _ := queueCounts(t, e.st)
		if q == 0 && s == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the resume %d rows stay queued and %d sending: %s", q, s, d.stderr.String())
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("drain after SIGTERM: %v: %s", err, d.stderr.String())
	}

	calls := simCalls(t, sim)
	after := map[string]int{}
	for _, c := range calls {
		if !c.At.Before(resumed) {
			after[c.Ref]++
		}
	}
	for id, h := range held {
		atts, err := e.st.MessageAttempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// Calls by later claims are attempts numbered past the held one.
		later, keptLate := 0, 0
		for _, a := range atts {
			switch {
			case a.Number > h.Attempts:
				later++
			case a.Number == h.Attempts:
				keptLate++
			}
		}
		if after[id] != later {
			t.Errorf("%s row %s: %d calls after the resume, %d of them by later claims: the frozen drain called on a lost lease",
				h.Identity, h.Key, after[id], later)
		}
		if h.Identity != "sm" && after[id] != 0 {
			t.Errorf("%s row %s (unknown or settled, never claimed again) was called %d times after the resume", h.Identity, h.Key, after[id])
		}
		hist, err := e.st.MessageHistory(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		gaveBack := false
		for _, en := range hist {
			gaveBack = gaveBack || (strings.HasPrefix(en.Detail, "not applied: ") && strings.Contains(en.Detail, "lease check: "))
		}
		switch {
		case calledBefore[id] == 0 && !gaveBack:
			t.Errorf("%s row %s, not called before the freeze: no history entry of its give-back: %+v", h.Identity, h.Key, hist)
		case calledBefore[id] > 0 && keptLate != 1:
			t.Errorf("%s row %s was called before the resume, but %d attempts of its held claim are on the row: the late answer was lost",
				h.Identity, h.Key, keptLate)
		}
	}
	late := len(held) - countZero(held, calledBefore)
	if late == 0 {
		t.Errorf("no held row was mid-call at the freeze: the late-answer half proved nothing")
	}

	perTo := map[string]int{}
	for _, dl := range deliveries(t, sim) {
		perTo[dl.To]++
		if perTo[dl.To] == 2 {
			t.Errorf("%s got a message twice", dl.To)
		}
		if dl.Ref == canceled {
			t.Errorf("the canceled row %s reached the phone at %s", held[canceled].Key, dl.At)
		}
	}
	// Rows held uncalled by identities that do not deduplicate stay
	// unknown (never sent blindly); of them only the resolved one's
	// recipient is reached, by its resend.
	leftUnknown := 0
	for id, h := range held {
		if h.Identity != "sm" && calledBefore[id] == 0 && id != resolved {
			leftUnknown++
		}
	}
	if want := n - 1 - leftUnknown; len(perTo) != want {
		t.Errorf("%d recipients reached, want %d (all but the canceled one and %d left unknown uncalled)", len(perTo), want, leftUnknown)
	}
	if m := e.get(rs.ID); m.State != state.Sent {
		t.Errorf("the resend is %s, want sent", m.State)
	}
	summary := regexp.MustCompile(`given back (\d+)`).FindStringSubmatch(d.stderr.String())
	if summary == nil {
		t.Fatalf("no drain summary: %s", d.stderr.String())
	}
	if gb, _ := strconv.Atoi(summary[1]); gb < countZero(held, calledBefore) {
		t.Errorf("drain gave back %d rows, want at least the %d it held uncalled", gb, countZero(held, calledBefore))
	}
	t.Logf("held %d rows, %d mid-call at the freeze; %d calls in all; %s", len(held), late, len(calls), strings.TrimSpace(lastLine(d.stderr.String())))
}

// countZero counts the held rows with no call in calls.
func countZero(held map[string]store.Message, calls map[string]int) int {
	n := 0
	for id := range held {
		if calls[id] == 0 {
			n++
		}
	}
	return n
}
