package state

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The events the matrix is written against. Fail is tried with every Reason
// (valid or not for Fail), Evidence with every status including the ones a
// provider never reports, Resolve with both verdicts and two it must refuse.
var (
	evEnqueue      = Event{Kind: Enqueue}
	evClaim        = Event{Kind: Claim}
	evAccept       = Event{Kind: Accept}
	evRetry        = Event{Kind: Retry}
	evAmbiguous    = Event{Kind: Ambiguous}
	evCancel       = Event{Kind: Cancel}
	evLeaseExpired = Event{Kind: LeaseExpired}
	evLeaseRequeue = Event{Kind: LeaseRequeue}
	evAbandon      = Event{Kind: Abandon}
	evTakeIn       = Event{Kind: TakeIn}
	evAdmit        = Event{Kind: Admit}
)

func failWith(r Reason) Event      { return Event{Kind: Fail, Reason: r} }
func evidenceOf(s State) Event     { return Event{Kind: Evidence, Status: s} }
func resolveAs(s State) Event      { return Event{Kind: Resolve, Status: s} }
func reviveFrom(r Reason) Event    { return Event{Kind: Revive, Reason: r} }
func withNone(all []State) []State { return append([]State{None}, all...) }

// allEvents is every event the matrix covers, in the order the matrix lists them.
var allEvents = []Event{
	evEnqueue,
	evTakeIn,
	evAdmit,
	evClaim,
	evAccept,
	evRetry,
	evAmbiguous,
	failWith(Permanent),
	failWith(Expired),
	failWith(Exhausted),
	failWith(Canceled),
	failWith(Resolved),
	failWith(OptedOut),
	failWith(Invalid),
	failWith(NoReason),
	evCancel,
	evLeaseExpired,
	evLeaseRequeue,
	evAbandon,
	evidenceOf(None),
	evidenceOf(Intake),
	evidenceOf(Queued),
	evidenceOf(Sending),
	evidenceOf(Unknown),
	evidenceOf(Sent),
	evidenceOf(Failed),
	evidenceOf(Delivered),
	evidenceOf(Read),
	resolveAs(None),
	resolveAs(Sent),
	resolveAs(Failed),
	resolveAs(Delivered),
	reviveFrom(OptedOut),
	reviveFrom(Permanent),
	reviveFrom(Canceled),
	reviveFrom(NoReason),
}

// want is the expected outcome of one (from, event) pair.
type want struct {
	refused bool
	to      State
	reason  Reason
	applied bool
}

var refused = want{refused: true}

// becomes is an applied move to s.
func becomes(s State) want { return want{to: s, applied: true} }

// failedAs is an applied move to failed with reason r.
func failedAs(r Reason) want { return want{to: Failed, reason: r, applied: true} }

// stays is evidence recorded in history but not applied: the row keeps s.
// Transition does not know the row's current reason, so Reason is empty
// even when s is failed; the store keeps the reason it already has.
func stays(s State) want { return want{to: s} }

func (w want) String() string {
	switch {
	case w.refused:
		return "is refused"
	case !w.applied:
		return "stays " + string(w.to) + " (recorded, not applied)"
	case w.reason != NoReason:
		return fmt.Sprintf("becomes %s(%s)", w.to, w.reason)
	}
	return "becomes " + string(w.to)
}

type pair struct {
	from State
	ev   Event
}

// matrix is the whole machine, written out by hand from internal/state/MACHINE.md: every
// (from, event) pair with its outcome. TestTransitionMatrixCoversEveryPair
// fails if a state or event is added without a row here.
var matrix = []struct {
	from State
	ev   Event
	want want
}{
	// No row yet: only Enqueue creates one.
	{None, evEnqueue, becomes(Queued)},
	{None, evClaim, refused},
	{None, evAccept, refused},
	{None, evRetry, refused},
	{None, evAmbiguous, refused},
	{None, failWith(Permanent), refused},
	{None, failWith(Expired), refused},
	{None, failWith(Exhausted), refused},
	{None, failWith(Canceled), refused},
	{None, failWith(Resolved), refused},
	{None, failWith(OptedOut), refused},
	{None, failWith(NoReason), refused},
	{None, evCancel, refused},
	{None, evLeaseExpired, refused},
	{None, evAbandon, refused},
	{None, evLeaseRequeue, refused},
	{None, evidenceOf(None), refused},
	{None, evidenceOf(Queued), refused},
	{None, evidenceOf(Sending), refused},
	{None, evidenceOf(Unknown), refused},
	{None, evidenceOf(Sent), refused},
	{None, evidenceOf(Failed), refused},
	{None, evidenceOf(Delivered), refused},
	{None, evidenceOf(Read), refused},
	{None, resolveAs(None), refused},
	{None, resolveAs(Sent), refused},
	{None, resolveAs(Failed), refused},
	{None, resolveAs(Delivered), refused},
	{None, reviveFrom(OptedOut), refused},
	{None, reviveFrom(Permanent), refused},
	{None, reviveFrom(Canceled), refused},
	{None, reviveFrom(NoReason), refused},

	// intake: taken in by PostgreSQL's enqueue(), not yet admitted. The
	// admission queues it or fails it as invalid; its deadline can pass
	// first. Nothing of it has gone out, so no evidence applies.
	{Intake, evEnqueue, refused},
	{Intake, evClaim, refused},
	{Intake, evAccept, refused},
	{Intake, evRetry, refused},
	{Intake, evAmbiguous, refused},
	{Intake, failWith(Permanent), refused},
	{Intake, failWith(Expired), failedAs(Expired)},
	{Intake, failWith(Exhausted), refused},
	{Intake, failWith(Canceled), refused},
	{Intake, failWith(Resolved), refused},
	{Intake, failWith(OptedOut), refused},
	{Intake, failWith(NoReason), refused},
	{Intake, evCancel, failedAs(Canceled)},
	{Intake, evLeaseExpired, refused},
	{Intake, evAbandon, refused},
	{Intake, evLeaseRequeue, refused},
	{Intake, evidenceOf(None), refused},
	{Intake, evidenceOf(Queued), refused},
	{Intake, evidenceOf(Sending), refused},
	{Intake, evidenceOf(Unknown), refused},
	{Intake, evidenceOf(Sent), refused},
	{Intake, evidenceOf(Failed), refused},
	{Intake, evidenceOf(Delivered), refused},
	{Intake, evidenceOf(Read), refused},
	{Intake, resolveAs(None), refused},
	{Intake, resolveAs(Sent), refused},
	{Intake, resolveAs(Failed), refused},
	{Intake, resolveAs(Delivered), refused},
	{Intake, reviveFrom(OptedOut), refused},
	{Intake, reviveFrom(Permanent), refused},
	{Intake, reviveFrom(Canceled), refused},
	{Intake, reviveFrom(NoReason), refused},
	{Intake, evTakeIn, refused},
	{Intake, evAdmit, becomes(Queued)},
	{Intake, failWith(Invalid), failedAs(Invalid)},
	{Intake, evidenceOf(Intake), refused},

	// The intake events on every other state (and evidence of intake,
	// which no provider reports): only a new row is taken in, only an
	// intake row admitted or refused as invalid.
	{None, evTakeIn, becomes(Intake)},
	{None, evAdmit, refused},
	{None, failWith(Invalid), refused},
	{None, evidenceOf(Intake), refused},
	{Queued, evTakeIn, refused},
	{Queued, evAdmit, refused},
	{Queued, failWith(Invalid), refused},
	{Queued, evidenceOf(Intake), refused},
	{Sending, evTakeIn, refused},
	{Sending, evAdmit, refused},
	{Sending, failWith(Invalid), refused},
	{Sending, evidenceOf(Intake), refused},
	{Unknown, evTakeIn, refused},
	{Unknown, evAdmit, refused},
	{Unknown, failWith(Invalid), refused},
	{Unknown, evidenceOf(Intake), refused},
	{Sent, evTakeIn, refused},
	{Sent, evAdmit, refused},
	{Sent, failWith(Invalid), refused},
	{Sent, evidenceOf(Intake), refused},
	{Failed, evTakeIn, refused},
	{Failed, evAdmit, refused},
	{Failed, failWith(Invalid), refused},
	{Failed, evidenceOf(Intake), refused},
	{Delivered, evTakeIn, refused},
	{Delivered, evAdmit, refused},
	{Delivered, failWith(Invalid), refused},
	{Delivered, evidenceOf(Intake), refused},
	{Read, evTakeIn, refused},
	{Read, evAdmit, refused},
	{Read, failWith(Invalid), refused},
	{Read, evidenceOf(Intake), refused},

	// queued: claimed by drain, expired or canceled without a call, or
	// moved forward by evidence of an earlier call (after a requeue).
	{Queued, evEnqueue, refused},
	{Queued, evClaim, becomes(Sending)},
	{Queued, evAccept, refused},
	{Queued, evRetry, refused},
	{Queued, evAmbiguous, refused},
	{Queued, failWith(Permanent), refused},
	{Queued, failWith(Expired), failedAs(Expired)},
	{Queued, failWith(Exhausted), refused},
	{Queued, failWith(Canceled), refused},
	{Queued, failWith(Resolved), refused},
	{Queued, failWith(OptedOut), failedAs(OptedOut)},
	{Queued, failWith(NoReason), refused},
	{Queued, evCancel, failedAs(Canceled)},
	{Queued, evLeaseExpired, refused},
	{Queued, evAbandon, becomes(Unknown)},
	{Queued, evLeaseRequeue, refused},
	{Queued, evidenceOf(None), refused},
	{Queued, evidenceOf(Queued), refused},
	{Queued, evidenceOf(Sending), refused},
	{Queued, evidenceOf(Unknown), refused},
	{Queued, evidenceOf(Sent), becomes(Sent)},
	{Queued, evidenceOf(Failed), failedAs(Permanent)},
	{Queued, evidenceOf(Delivered), becomes(Delivered)},
	{Queued, evidenceOf(Read), becomes(Read)},
	{Queued, resolveAs(None), refused},
	{Queued, resolveAs(Sent), refused},
	{Queued, resolveAs(Failed), refused},
	{Queued, resolveAs(Delivered), refused},
	{Queued, reviveFrom(OptedOut), refused},
	{Queued, reviveFrom(Permanent), refused},
	{Queued, reviveFrom(Canceled), refused},
	{Queued, reviveFrom(NoReason), refused},

	// sending: the lease holder records the answer; reconcile handles a
	// vanished holder; an operator may give a verdict on an abandoned row.
	{Sending, evEnqueue, refused},
	{Sending, evClaim, refused},
	{Sending, evAccept, becomes(Sent)},
	{Sending, evRetry, becomes(Queued)},
	{Sending, evAmbiguous, becomes(Unknown)},
	{Sending, failWith(Permanent), failedAs(Permanent)},
	{Sending, failWith(Expired), failedAs(Expired)},
	{Sending, failWith(Exhausted), failedAs(Exhausted)},
	{Sending, failWith(Canceled), refused},
	{Sending, failWith(Resolved), refused},
	{Sending, failWith(OptedOut), failedAs(OptedOut)},
	{Sending, failWith(NoReason), refused},
	{Sending, evCancel, refused},
	{Sending, evLeaseExpired, becomes(Unknown)},
	{Sending, evAbandon, becomes(Unknown)},
	{Sending, evLeaseRequeue, becomes(Queued)},
	{Sending, evidenceOf(None), refused},
	{Sending, evidenceOf(Queued), refused},
	{Sending, evidenceOf(Sending), refused},
	{Sending, evidenceOf(Unknown), refused},
	{Sending, evidenceOf(Sent), becomes(Sent)},
	{Sending, evidenceOf(Failed), failedAs(Permanent)},
	{Sending, evidenceOf(Delivered), becomes(Delivered)},
	{Sending, evidenceOf(Read), becomes(Read)},
	{Sending, resolveAs(None), refused},
	{Sending, resolveAs(Sent), becomes(Sent)},
	{Sending, resolveAs(Failed), failedAs(Resolved)},
	{Sending, resolveAs(Delivered), refused},
	{Sending, reviveFrom(OptedOut), refused},
	{Sending, reviveFrom(Permanent), refused},
	{Sending, reviveFrom(Canceled), refused},
	{Sending, reviveFrom(NoReason), refused},

	// unknown: schedules nothing; only evidence or an operator moves it.
	{Unknown, evEnqueue, refused},
	{Unknown, evClaim, refused},
	{Unknown, evAccept, refused},
	{Unknown, evRetry, refused},
	{Unknown, evAmbiguous, refused},
	{Unknown, failWith(Permanent), refused},
	{Unknown, failWith(Expired), refused},
	{Unknown, failWith(Exhausted), refused},
	{Unknown, failWith(Canceled), refused},
	{Unknown, failWith(Resolved), refused},
	{Unknown, failWith(OptedOut), refused},
	{Unknown, failWith(NoReason), refused},
	{Unknown, evCancel, refused},
	{Unknown, evLeaseExpired, refused},
	{Unknown, evAbandon, refused},
	{Unknown, evLeaseRequeue, refused},
	{Unknown, evidenceOf(None), refused},
	{Unknown, evidenceOf(Queued), refused},
	{Unknown, evidenceOf(Sending), refused},
	{Unknown, evidenceOf(Unknown), refused},
	{Unknown, evidenceOf(Sent), becomes(Sent)},
	{Unknown, evidenceOf(Failed), failedAs(Permanent)},
	{Unknown, evidenceOf(Delivered), becomes(Delivered)},
	{Unknown, evidenceOf(Read), becomes(Read)},
	{Unknown, resolveAs(None), refused},
	{Unknown, resolveAs(Sent), becomes(Sent)},
	{Unknown, resolveAs(Failed), failedAs(Resolved)},
	{Unknown, resolveAs(Delivered), refused},
	{Unknown, reviveFrom(OptedOut), refused},
	{Unknown, reviveFrom(Permanent), refused},
	{Unknown, reviveFrom(Canceled), refused},
	{Unknown, reviveFrom(NoReason), refused},

	// sent: finished for drain; evidence moves it forward only.
	{Sent, evEnqueue, refused},
	{Sent, evClaim, refused},
	{Sent, evAccept, refused},
	{Sent, evRetry, refused},
	{Sent, evAmbiguous, refused},
	{Sent, failWith(Permanent), refused},
	{Sent, failWith(Expired), refused},
	{Sent, failWith(Exhausted), refused},
	{Sent, failWith(Canceled), refused},
	{Sent, failWith(Resolved), refused},
	{Sent, failWith(OptedOut), refused},
	{Sent, failWith(NoReason), refused},
	{Sent, evCancel, refused},
	{Sent, evLeaseExpired, refused},
	{Sent, evAbandon, refused},
	{Sent, evLeaseRequeue, refused},
	{Sent, evidenceOf(None), refused},
	{Sent, evidenceOf(Queued), refused},
	{Sent, evidenceOf(Sending), refused},
	{Sent, evidenceOf(Unknown), refused},
	{Sent, evidenceOf(Sent), stays(Sent)},
	{Sent, evidenceOf(Failed), failedAs(Permanent)},
	{Sent, evidenceOf(Delivered), becomes(Delivered)},
	{Sent, evidenceOf(Read), becomes(Read)},
	{Sent, resolveAs(None), refused},
	{Sent, resolveAs(Sent), refused},
	{Sent, resolveAs(Failed), refused},
	{Sent, resolveAs(Delivered), refused},
	{Sent, reviveFrom(OptedOut), refused},
	{Sent, reviveFrom(Permanent), refused},
	{Sent, reviveFrom(Canceled), refused},
	{Sent, reviveFrom(NoReason), refused},

	// failed: a late "sent" is stale; delivered/read rank above it.
	{Failed, evEnqueue, refused},
	{Failed, evClaim, refused},
	{Failed, evAccept, refused},
	{Failed, evRetry, refused},
	{Failed, evAmbiguous, refused},
	{Failed, failWith(Permanent), refused},
	{Failed, failWith(Expired), refused},
	{Failed, failWith(Exhausted), refused},
	{Failed, failWith(Canceled), refused},
	{Failed, failWith(Resolved), refused},
	{Failed, failWith(OptedOut), refused},
	{Failed, failWith(NoReason), refused},
	{Failed, evCancel, refused},
	{Failed, evLeaseExpired, refused},
	{Failed, evAbandon, refused},
	{Failed, evLeaseRequeue, refused},
	{Failed, evidenceOf(None), refused},
	{Failed, evidenceOf(Queued), refused},
	{Failed, evidenceOf(Sending), refused},
	{Failed, evidenceOf(Unknown), refused},
	{Failed, evidenceOf(Sent), stays(Failed)},
	{Failed, evidenceOf(Failed), stays(Failed)},
	{Failed, evidenceOf(Delivered), becomes(Delivered)},
	{Failed, evidenceOf(Read), becomes(Read)},
	{Failed, resolveAs(None), refused},
	{Failed, resolveAs(Sent), refused},
	{Failed, resolveAs(Failed), refused},
	{Failed, resolveAs(Delivered), refused},
	{Failed, reviveFrom(OptedOut), becomes(Queued)},
	{Failed, reviveFrom(Permanent), refused},
	{Failed, reviveFrom(Canceled), refused},
	{Failed, reviveFrom(NoReason), refused},

	// delivered: a stale failure is recorded, never applied.
	{Delivered, evEnqueue, refused},
	{Delivered, evClaim, refused},
	{Delivered, evAccept, refused},
	{Delivered, evRetry, refused},
	{Delivered, evAmbiguous, refused},
	{Delivered, failWith(Permanent), refused},
	{Delivered, failWith(Expired), refused},
	{Delivered, failWith(Exhausted), refused},
	{Delivered, failWith(Canceled), refused},
	{Delivered, failWith(Resolved), refused},
	{Delivered, failWith(OptedOut), refused},
	{Delivered, failWith(NoReason), refused},
	{Delivered, evCancel, refused},
	{Delivered, evLeaseExpired, refused},
	{Delivered, evAbandon, refused},
	{Delivered, evLeaseRequeue, refused},
	{Delivered, evidenceOf(None), refused},
	{Delivered, evidenceOf(Queued), refused},
	{Delivered, evidenceOf(Sending), refused},
	{Delivered, evidenceOf(Unknown), refused},
	{Delivered, evidenceOf(Sent), stays(Delivered)},
	{Delivered, evidenceOf(Failed), stays(Delivered)},
	{Delivered, evidenceOf(Delivered), stays(Delivered)},
	{Delivered, evidenceOf(Read), becomes(Read)},
	{Delivered, resolveAs(None), refused},
	{Delivered, resolveAs(Sent), refused},
	{Delivered, resolveAs(Failed), refused},
	{Delivered, resolveAs(Delivered), refused},
	{Delivered, reviveFrom(OptedOut), refused},
	{Delivered, reviveFrom(Permanent), refused},
	{Delivered, reviveFrom(Canceled), refused},
	{Delivered, reviveFrom(NoReason), refused},

	// read: the top; every evidence is stale.
	{Read, evEnqueue, refused},
	{Read, evClaim, refused},
	{Read, evAccept, refused},
	{Read, evRetry, refused},
	{Read, evAmbiguous, refused},
	{Read, failWith(Permanent), refused},
	{Read, failWith(Expired), refused},
	{Read, failWith(Exhausted), refused},
	{Read, failWith(Canceled), refused},
	{Read, failWith(Resolved), refused},
	{Read, failWith(OptedOut), refused},
	{Read, failWith(NoReason), refused},
	{Read, evCancel, refused},
	{Read, evLeaseExpired, refused},
	{Read, evAbandon, refused},
	{Read, evLeaseRequeue, refused},
	{Read, evidenceOf(None), refused},
	{Read, evidenceOf(Queued), refused},
	{Read, evidenceOf(Sending), refused},
	{Read, evidenceOf(Unknown), refused},
	{Read, evidenceOf(Sent), stays(Read)},
	{Read, evidenceOf(Failed), stays(Read)},
	{Read, evidenceOf(Delivered), stays(Read)},
	{Read, evidenceOf(Read), stays(Read)},
	{Read, resolveAs(None), refused},
	{Read, resolveAs(Sent), refused},
	{Read, resolveAs(Failed), refused},
	{Read, resolveAs(Delivered), refused},
	{Read, reviveFrom(OptedOut), refused},
	{Read, reviveFrom(Permanent), refused},
	{Read, reviveFrom(Canceled), refused},
	{Read, reviveFrom(NoReason), refused},
}

// rowName reads well at the start of a sentence-like test name.
func rowName(s State) string {
	if s == None {
		return "a row that does not exist yet"
	}
	return "a " + string(s) + " row"
}

func TestTransitionFollowsTheMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range matrix {
		t.Run(fmt.Sprintf("%s on %s %s", rowName(tc.from), tc.ev, tc.want), func(t *testing.T) {
			t.Parallel()
			res, err := Transition(tc.from, tc.ev)
			if tc.want.refused {
				checkRefusal(t, tc.from, tc.ev, res, err)
				return
			}
			if err != nil {
				t.Fatalf("Transition(%q, %s) refused: %v; want %s", tc.from, tc.ev, err, tc.want)
			}
			got := Result{To: tc.want.to, Reason: tc.want.reason, Applied: tc.want.applied}
			if res != got {
				t.Fatalf("Transition(%q, %s) = %+v; want %+v", tc.from, tc.ev, res, got)
			}
		})
	}
}

// checkRefusal asserts a refusal is a readable *RefusedError matching ErrRefused.
func checkRefusal(t *testing.T, from State, ev Event, res Result, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Transition(%q, %s) = %+v; want a refusal", from, ev, res)
	}
	if res != (Result{}) {
		t.Errorf("a refusal returned a non-zero result %+v", res)
	}
	if !errors.Is(err, ErrRefused) {
		t.Errorf("errors.Is(%v, ErrRefused) = false", err)
	}
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("error %T is not a *RefusedError", err)
	}
	if re.From != from || re.Event != ev {
		t.Errorf("RefusedError names (%q, %s); want (%q, %s)", re.From, re.Event, from, ev)
	}
	if strings.TrimSpace(re.Why) == "" {
		t.Errorf("RefusedError for (%q, %s) has no reason", from, ev)
	}
	name := string(from)
	if from == None {
		name = "(none)"
	}
	prefix := fmt.Sprintf("cannot %s a row in state %s: ", ev, name)
	if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, re.Why) {
		t.Errorf("message %q; want %q followed by the reason", msg, prefix)
	}
}

func TestTransitionMatrixCoversEveryPair(t *testing.T) {
	t.Parallel()
	seen := make(map[pair]bool, len(matrix))
	for _, tc := range matrix {
		p := pair{tc.from, tc.ev}
		if seen[p] {
			t.Errorf("the matrix lists (%q, %s) twice", tc.from, tc.ev)
		}
		seen[p] = true
		if !slices.Contains(allEvents, tc.ev) {
			t.Errorf("the matrix uses event %s, missing from allEvents", tc.ev)
		}
		if tc.from != None && !slices.Contains(All, tc.from) {
			t.Errorf("the matrix uses state %q, missing from All", tc.from)
		}
	}
	for _, from := range withNone(All) {
		for _, ev := range allEvents {
			if !seen[pair{from, ev}] {
				t.Errorf("the matrix has no expected result for (%q, %s)", from, ev)
			}
		}
	}
	if want := (len(All) + 1) * len(allEvents); len(matrix) != want {
		t.Errorf("the matrix has %d rows; want %d", len(matrix), want)
	}
}

// declaredConsts reads state.go and returns the string values of the
// constants declared with the named type, so that a new state, event kind or
// reason added there without a row in the matrix fails the test.
func declaredConsts(t *testing.T, typeName string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "state.go", nil, 0)
	if err != nil {
		t.Fatalf("parse state.go: %v", err)
	}
	var vals []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			id, ok := vs.Type.(*ast.Ident)
			if !ok || id.Name != typeName {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("constant %s in state.go is not a string literal", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("constant %s: %v", name.Name, err)
				}
				vals = append(vals, v)
			}
		}
	}
	if len(vals) == 0 {
		t.Fatalf("found no constants of type %s in state.go", typeName)
	}
	return vals
}

func TestEveryDeclaredStateKindAndReasonIsInTheMatrix(t *testing.T) {
	t.Parallel()
	t.Run("every declared state is None or in All", func(t *testing.T) {
		t.Parallel()
		for _, v := range declaredConsts(t, "State") {
			if !slices.Contains(withNone(All), State(v)) {
				t.Errorf("state %q is declared but missing from All (and so from the matrix)", v)
			}
		}
	})
	t.Run("every declared event kind is in the matrix", func(t *testing.T) {
		t.Parallel()
		for _, v := range declaredConsts(t, "Kind") {
			if !slices.ContainsFunc(allEvents, func(e Event) bool { return e.Kind == Kind(v) }) {
				t.Errorf("event kind %q is declared but missing from the matrix", v)
			}
		}
	})
	t.Run("every declared reason is tried with fail", func(t *testing.T) {
		t.Parallel()
		for _, v := range declaredConsts(t, "Reason") {
			if !slices.Contains(allEvents, failWith(Reason(v))) {
				t.Errorf("reason %q is declared but fail(%s) is missing from the matrix", v, v)
			}
		}
	})
	t.Run("every state is tried as evidence", func(t *testing.T) {
		t.Parallel()
		for _, s := range withNone(All) {
			if !slices.Contains(allEvents, evidenceOf(s)) {
				t.Errorf("evidence(%s) is missing from the matrix", s)
			}
		}
	})
}

func TestTransitionRefusesAnUnknownFromState(t *testing.T) {
	t.Parallel()
	for _, ev := range allEvents {
		t.Run("a bogus row on "+ev.String()+" is refused", func(t *testing.T) {
			t.Parallel()
			res, err := Transition("bogus", ev)
			checkRefusal(t, "bogus", ev, res, err)
			if !strings.Contains(err.Error(), "unknown state") {
				t.Errorf("message %q does not say the state is unknown", err)
			}
		})
	}
}

func TestTransitionRefusesAnUnknownEventKind(t *testing.T) {
	t.Parallel()
	for _, from := range All {
		t.Run("a "+string(from)+" row on an unknown event is refused", func(t *testing.T) {
			t.Parallel()
			ev := Event{Kind: "teleport"}
			res, err := Transition(from, ev)
			checkRefusal(t, from, ev, res, err)
		})
	}
}

func TestRefusalMessagesReadWell(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from State
		ev   Event
		msg  string
	}{
		{None, evClaim, "cannot claim a row in state (none): the row does not exist"},
		{Queued, evEnqueue, "cannot enqueue a row in state queued: the row already exists"},
		{Unknown, evClaim, "cannot claim a row in state unknown: only queued rows are claimed"},
		{Delivered, failWith(Permanent), "cannot fail(permanent) a row in state delivered: only the answer to a call fails a row as permanent"},
		{Sending, failWith(NoReason), "cannot fail a row in state sending: fail needs reason permanent, expired, exhausted, opted_out or invalid"},
		{Sent, evCancel, "cannot cancel a row in state sent: only a queued row has certainly not gone out"},
		{Sent, evidenceOf(Unknown), "cannot evidence(unknown) a row in state sent: evidence is sent, delivered, read or failed"},
		{Unknown, resolveAs(Delivered), "cannot resolve(delivered) a row in state unknown: a verdict is sent or failed"},
	}
	for _, tc := range cases {
		t.Run("the message for "+tc.ev.String()+" on "+rowName(tc.from)+" says why", func(t *testing.T) {
			t.Parallel()
			_, err := Transition(tc.from, tc.ev)
			if err == nil || err.Error() != tc.msg {
				t.Fatalf("got %v; want %q", err, tc.msg)
			}
		})
	}
}

func TestRankOrdersStatesAsInTheDesign(t *testing.T) {
	t.Parallel()
	ranks := map[State]int{
		Queued: 0, Sending: 1, Unknown: 1, Sent: 2, Failed: 3, Delivered: 4, Read: 5,
		None: -1, "bogus": -1, "QUEUED": -1,
	}
	for s, want := range ranks {
		t.Run(fmt.Sprintf("state %q has rank %d", s, want), func(t *testing.T) {
			t.Parallel()
			if got := s.Rank(); got != want {
				t.Fatalf("Rank() = %d; want %d", got, want)
			}
		})
	}
	t.Run("All is listed in non-decreasing rank order", func(t *testing.T) {
		t.Parallel()
		for i := 1; i < len(All); i++ {
			if All[i].Rank() < All[i-1].Rank() {
				t.Errorf("%s (rank %d) comes after %s (rank %d)", All[i], All[i].Rank(), All[i-1], All[i-1].Rank())
			}
		}
	})
	t.Run("a stale failure ranks below a delivery", func(t *testing.T) {
		t.Parallel()
		if !(Sent.Rank() < Failed.Rank() && Failed.Rank() < Delivered.Rank()) {
			t.Fatal("want sent < failed < delivered")
		}
	})
}

func TestValidAcceptsOnlyRowStates(t *testing.T) {
	t.Parallel()
	for _, s := range All {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []State{None, "bogus", "Sent", "resolved"} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, s := range All {
		t.Run("the name "+string(s)+" parses to its state", func(t *testing.T) {
			t.Parallel()
			got, err := Parse(string(s))
			if err != nil || got != s {
				t.Fatalf("Parse(%q) = %q, %v; want %q, nil", s, got, err, s)
			}
		})
	}
	for _, in := range []string{"", "bogus", "QUEUED", " sent", "sent ", "resolved", "canceled"} {
		t.Run(fmt.Sprintf("the name %q is rejected with the valid names", in), func(t *testing.T) {
			t.Parallel()
			got, err := Parse(in)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, nil; want an error", in, got)
			}
			if got != None {
				t.Errorf("Parse(%q) returned %q with its error; want None", in, got)
			}
			msg := err.Error()
			if !strings.Contains(msg, strconv.Quote(in)) {
				t.Errorf("message %q does not quote the input", msg)
			}
			for _, s := range All {
				if !strings.Contains(msg, string(s)) {
					t.Errorf("message %q does not name the valid state %s", msg, s)
				}
			}
		})
	}
}

func TestFinishedAndInFlight(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s                  State
		finished, inFlight bool
	}{
		{None, false, false},
		{Queued, false, false},
		{Sending, false, true},
		{Unknown, false, true},
		{Sent, true, false},
		{Failed, true, false},
		{Delivered, true, false},
		{Read, true, false},
		{"bogus", false, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("state %q is finished=%t and in flight=%t", tc.s, tc.finished, tc.inFlight), func(t *testing.T) {
			t.Parallel()
			if got := tc.s.Finished(); got != tc.finished {
				t.Errorf("Finished() = %t", got)
			}
			if got := tc.s.InFlight(); got != tc.inFlight {
				t.Errorf("InFlight() = %t", got)
			}
		})
	}
	t.Run("every state in All is finished, in flight, or waiting (intake or queued)", func(t *testing.T) {
		t.Parallel()
		for _, s := range All {
			n := 0
			for _, b := range []bool{s.Finished(), s.InFlight(), s == Queued || s == Intake} {
				if b {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s is in %d of {finished, in flight, queued}; want exactly 1", s, n)
			}
		}
	})
}

func TestReasonValid(t *testing.T) {
	t.Parallel()
	cases := map[Reason]bool{
		Permanent: true, Expired: true, Exhausted: true, Canceled: true, Resolved: true, OptedOut: true,
		NoReason: false, "bogus": false, "Permanent": false, "failed": false,
	}
	for r, want := range cases {
		t.Run(fmt.Sprintf("reason %q is valid=%t", r, want), func(t *testing.T) {
			t.Parallel()
			if got := r.Valid(); got != want {
				t.Fatalf("Valid() = %t; want %t", got, want)
			}
		})
	}
}

func TestEventString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ev   Event
		want string
	}{
		{evClaim, "claim"},
		{evLeaseExpired, "lease_expired"},
		{evLeaseRequeue, "lease_requeue"},
		{evAbandon, "abandon"},
		{failWith(Permanent), "fail(permanent)"},
		{failWith(NoReason), "fail"},
		{evidenceOf(Delivered), "evidence(delivered)"},
		{evidenceOf(None), "evidence"},
		{resolveAs(Failed), "resolve(failed)"},
		{Event{Kind: Fail, Status: Sent, Reason: Expired}, "fail(sent)"}, // status wins over reason
		{Event{}, ""},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("the event %+v prints as %q", tc.ev, tc.want), func(t *testing.T) {
			t.Parallel()
			if got := tc.ev.String(); got != tc.want {
				t.Fatalf("String() = %q; want %q", got, tc.want)
			}
		})
	}
}
