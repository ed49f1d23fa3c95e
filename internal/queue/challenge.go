package queue

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// Step is one later step of a challenge (docs/challenges.md): a --then
// with its --then-text, --then-subject and --then-after, or an item of a
// --file line's "steps". The JSON field names are a contract.
type Step struct {
	Identity string   `json:"identity"`
	To       string   `json:"to"`
	Region   string   `json:"region"`
	Channel  string   `json:"channel"`
	Template string   `json:"template"`
	Lang     string   `json:"lang"`
	Params   []string `json:"params"`
	Text     string   `json:"text"`
	Subject  string   `json:"subject"`
	After    string   `json:"after"`
}

// IsChallenge says the spec asks for a challenge rather than one send.
func (s *Spec) IsChallenge() bool {
	return len(s.Steps) > 0 || s.Supersedes != "" || s.AcceptDuplicateRisk || s.ThenIfUndelivered
}

// Challenge checks a spec with steps (a --file line's, an API body's) as
// send's --then flags are checked, and builds its challenge. Errors are
// bad input (exit 2).
func (s *Spec) Challenge(now time.Time, d Defaults) (store.ChallengeParams, error) {
	switch {
	case len(s.Steps) == 0:
		return store.ChallengeParams{}, &store.InvalidError{Msg: "accept_duplicate_risk, then_if_undelivered and supersedes need \"steps\""}
	case s.NotBefore != "":
		return store.ChallengeParams{}, &store.InvalidError{Msg: "not_before cannot be combined with steps: a challenge's first step goes out at once"}
	case s.ExpiresIn == "" && s.ExpiresAt == "":
		return store.ChallengeParams{}, &store.InvalidError{Msg: "a challenge needs a deadline: expires_in or expires_at"}
	}
	return ChallengeParams(s, s.Steps, s.AcceptDuplicateRisk, s.ThenIfUndelivered, s.Supersedes, now, d)
}

// ChallengeParams builds a challenge from its first send and its later
// steps. Errors are bad input (exit 2) naming the step.
func ChallengeParams(spec *Spec, steps []Step, acceptDup, ifUndeliv bool, supersedes string, now time.Time, d Defaults) (store.ChallengeParams, error) {
	first, err := spec.Admit(now, d)
	if err != nil {
		return store.ChallengeParams{}, err
	}
	p := store.ChallengeParams{Tenant: first.Tenant, Key: first.Key, ExpiresIn: first.ExpiresIn, ExpiresAt: first.ExpiresAt,
		AcceptDuplicateRisk: acceptDup, FallbackUndelivered: ifUndeliv, Supersedes: supersedes,
		Steps: []store.ChallengeStepParams{{EnqueueParams: first}}}
	for i, st := range steps {
		name := fmt.Sprintf("step %d (%s:%s)", i+2, st.Identity, st.To)
		after, err := time.ParseDuration(st.After)
		if err != nil || after <= 0 {
			return p, &store.InvalidError{Field: name + ": after", Msg: fmt.Sprintf("%q must be a positive duration like 2m", st.After)}
		}
		region := st.Region
		if region == "" {
			region = spec.Region
		}
		s := Spec{Key: spec.Key, To: st.To, Region: region, Channel: st.Channel, Identity: st.Identity, Template: st.Template,
			Lang: st.Lang, Params: st.Params, Text: st.Text, Subject: st.Subject, Purpose: spec.Purpose,
			Ref: spec.Ref, Lane: spec.Lane, ExpiresIn: spec.ExpiresIn, ExpiresAt: spec.ExpiresAt, Tenant: spec.Tenant}
		sd := d
		sd.Channel = "" // --channel is step 1's; a step's identity decides its own
		ep, err := s.Admit(now, sd)
		if err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
		p.Steps = append(p.Steps, store.ChallengeStepParams{EnqueueParams: ep, After: after})
	}
	return p, nil
}
