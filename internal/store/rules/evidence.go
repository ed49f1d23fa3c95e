package rules

import (
	"errors"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// EvidenceStep is what applying one pending status writes, as Evidence
// decides it.
type EvidenceStep struct {
	// Pending: the status stays pending and nothing is written: no row is
	// known yet, or a drain holds a live lease of it (that drain records
	// its own answer; a later run matches again).
	Pending bool
	// Suspect, when set, is why the status is set aside (outcome suspect,
	// no row touched).
	Suspect string
	// Applied is the status's outcome as EvidenceApply reports it: its
	// Outcome is the evidence row's new outcome and MessageID its
	// message_id.
	Applied store.AppliedEvidence
	// Transition, when set, is the transition the status makes (an
	// applied or a merely recorded one); nil when the machine refused it.
	Transition *store.TransitionParams
	// Result is the machine's answer to Transition.
	Result state.Result
	// RecordsID says Transition writes the status's provider id on a row
	// matched by its callback reference alone, which had none: pending
	// statuses of that id (in that identity) can be matched now.
	RecordsID bool
}

// Evidence decides a pending status st against the rows it could be
// about, as read under the write's lock at now (the store's clock):
// byPID, the rows of st's identity with its provider id, and ref, the
// row its callback reference names (store.MatchStatus picks the row).
// The machine decides what the status does to that row (evidence only
// moves a row forward: a lower-ranked status is recorded, not applied);
// a refusal is the status's outcome, not an error. An error is a fault
// of the machine's, never the status's.
func Evidence(st *store.StatusEvidence, byPID []store.MatchRow, ref *store.MatchRow, now time.Time) (EvidenceStep, error) {
	m, byRef, suspect := store.MatchStatus(st, byPID, ref)
	if suspect != "" {
		return EvidenceStep{Suspect: suspect, Applied: store.AppliedEvidence{EvidenceID: st.ID, ProviderID: st.ProviderID,
			Status: st.Status, Outcome: store.EvidenceSuspect, Detail: st.HistoryDetail() + ": set aside: " + suspect}}, nil
	}
	if m == nil || (m.State == state.Sending && m.LeaseUntil != nil && m.LeaseUntil.After(now)) {
		return EvidenceStep{Pending: true}, nil
	}
	ev := state.Event{Kind: state.Evidence, Status: st.Status}
	step := EvidenceStep{Applied: store.AppliedEvidence{EvidenceID: st.ID, MessageID: m.ID, ProviderID: st.ProviderID,
		Status: st.Status, From: m.State, To: m.State, Detail: st.HistoryDetail()}}
	res, err := state.Transition(m.State, ev)
	var refused *state.RefusedError
	switch {
	case errors.As(err, &refused):
		step.Applied.Outcome = store.EvidenceRefused
		step.Applied.Detail += ": refused: " + refused.Why
		return step, nil
	case err != nil:
		return EvidenceStep{}, err
	}
	tp := &store.TransitionParams{ID: m.ID, From: m.State, Event: ev, Source: store.SourceWebhook, Detail: step.Applied.Detail, Now: now}
	if byRef && m.ProviderID == "" && st.ProviderID != "" {
		tp.ProviderID, step.RecordsID = st.ProviderID, true
	}
	if res.Applied && st.Status == state.Failed {
		tp.LastError = st.LastError()
	}
	step.Transition, step.Result = tp, res
	step.Applied.To, step.Applied.Outcome = res.To, store.EvidenceRecorded
	if res.Applied {
		step.Applied.Outcome = store.EvidenceApplied
	}
	return step, nil
}

// After is row m as a later status of the same batch sees it once the
// step is written (m is the row the step's transition names).
func (s EvidenceStep) After(m store.MatchRow) store.MatchRow {
	if s.Transition == nil || s.Transition.ID != m.ID {
		return m
	}
	if s.Transition.ProviderID != "" {
		m.ProviderID = s.Transition.ProviderID
	}
	if s.Result.Applied {
		m.State = s.Result.To
		if s.Result.To != state.Sending {
			m.LeaseUntil = nil
		}
	}
	return m
}
