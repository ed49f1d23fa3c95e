package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func status(s state.State) *store.StatusEvidence {
	return &store.StatusEvidence{ID: "ev1", Provider: "whatsapp", Identity: "main", ProviderID: "wamid.X", Status: s, At: t0}
}

func TestEvidenceAppliesForwardAndRecordsTheRest(t *testing.T) {
	for _, c := range []struct {
		row, status state.State
		outcome     string
		to          state.State
	}{
		{state.Sent, state.Delivered, store.EvidenceApplied, state.Delivered},
		{state.Delivered, state.Sent, store.EvidenceRecorded, state.Delivered},
		{state.Read, state.Delivered, store.EvidenceRecorded, state.Read},
		{state.Delivered, state.Failed, store.EvidenceRecorded, state.Delivered},
		{state.Sent, state.Failed, store.EvidenceApplied, state.Failed},
	} {
		st := status(c.status)
		st.Error = "boom"
		row := store.MatchRow{ID: "m1", Identity: "main", ProviderID: "wamid.X", State: c.row}
		step, err := Evidence(st, []store.MatchRow{row}, nil, t0)
		if err != nil {
			t.Fatalf("%s on %s: %v", c.status, c.row, err)
		}
		a := step.Applied
		if step.Pending || step.Suspect != "" || step.Transition == nil || a.Outcome != c.outcome || a.From != c.row || a.To != c.to || a.MessageID != "m1" {
			t.Fatalf("%s on %s: %+v", c.status, c.row, step)
		}
		tp := step.Transition
		if tp.ID != "m1" || tp.From != c.row || tp.Source != store.SourceWebhook || tp.Detail != a.Detail || !tp.Now.Equal(t0) || tp.ProviderID != "" {
			t.Fatalf("%s on %s: transition %+v", c.status, c.row, tp)
		}
		// Only a failure that moves the row writes its error.
		if want := c.status == state.Failed && c.outcome == store.EvidenceApplied; (tp.LastError == "boom") != want {
			t.Fatalf("%s on %s: last error %q", c.status, c.row, tp.LastError)
		}
	}
}

func TestEvidenceRefusedIsAnOutcome(t *testing.T) {
	row := store.MatchRow{ID: "m1", Identity: "main", ProviderID: "wamid.X", State: state.Sent}
	step, err := Evidence(status(state.Queued), []store.MatchRow{row}, nil, t0)
	if err != nil || step.Transition != nil || step.Applied.Outcome != store.EvidenceRefused || !strings.Contains(step.Applied.Detail, ": refused: ") {
		t.Fatalf("%+v, %v", step, err)
	}
	if step.After(row) != row {
		t.Fatal("a refusal changed the row")
	}
}

func TestEvidenceWaitsForARowAndALiveLease(t *testing.T) {
	step, err := Evidence(status(state.Delivered), nil, nil, t0)
	if err != nil || !step.Pending {
		t.Fatalf("no row: %+v, %v", step, err)
	}
	live, over := t0.Add(time.Second), t0
	for _, c := range []struct {
		until   *time.Time
		pending bool
	}{{&live, true}, {&over, false}, {nil, false}} {
		row := store.MatchRow{ID: "m1", Identity: "main", ProviderID: "wamid.X", State: state.Sending, LeaseUntil: c.until}
		step, err := Evidence(status(state.Delivered), []store.MatchRow{row}, nil, t0)
		if err != nil || step.Pending != c.pending {
			t.Fatalf("lease %v: %+v, %v", c.until, step, err)
		}
	}
}

func TestEvidenceSetsSuspectsAside(t *testing.T) {
	rows := []store.MatchRow{{ID: "m1", Identity: "main", ProviderID: "wamid.X"}, {ID: "m2", Identity: "main", ProviderID: "wamid.X"}}
	step, err := Evidence(status(state.Delivered), rows, nil, t0)
	if err != nil || step.Suspect == "" || step.Transition != nil || step.Applied.Outcome != store.EvidenceSuspect ||
		step.Applied.MessageID != "" || !strings.HasSuffix(step.Applied.Detail, ": set aside: "+step.Suspect) {
		t.Fatalf("%+v, %v", step, err)
	}
}

func TestEvidenceByReferenceRecordsTheProviderID(t *testing.T) {
	st := status(state.Delivered)
	st.CallbackRef = "m1"
	lease := t0.Add(-time.Minute)
	ref := store.MatchRow{ID: "m1", Identity: "main", State: state.Sent, LeaseUntil: &lease}
	step, err := Evidence(st, nil, &ref, t0)
	if err != nil || !step.RecordsID || step.Transition.ProviderID != "wamid.X" || step.Applied.Outcome != store.EvidenceApplied {
		t.Fatalf("%+v, %v", step, err)
	}
	after := step.After(ref)
	if after.ProviderID != "wamid.X" || after.State != state.Delivered || after.LeaseUntil != nil {
		t.Fatalf("after: %+v", after)
	}
	if other := (store.MatchRow{ID: "m2", State: state.Sent}); step.After(other) != other {
		t.Fatal("After changed another row")
	}
	// A row that has its provider id already keeps it.
	ref.ProviderID = "wamid.X"
	if step, err := Evidence(st, nil, &ref, t0); err != nil || step.RecordsID || step.Transition.ProviderID != "" {
		t.Fatalf("%+v, %v", step, err)
	}
}
