package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/queue"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

// challengeFlags are send's flags for a verification challenge
// (docs/challenges.md): later steps on other channels, tried only when
// every earlier step provably went nowhere. They are named --then... so
// as not to be mistaken for --fallback-template, WhatsApp's template for
// a closed customer-service window, which is another thing.
type challengeFlags struct {
	then        []string // IDENTITY:TO, one per later step
	thenText    []string
	thenSubject []string
	thenAfter   []string
	acceptDup   bool
	ifUndeliv   bool
	supersedes  string
}

// given says a challenge was asked for.
func (c *challengeFlags) given() bool {
	return len(c.then) > 0 || len(c.thenText) > 0 || len(c.thenAfter) > 0 || len(c.thenSubject) > 0 ||
		c.acceptDup || c.ifUndeliv || c.supersedes != ""
}

func (c *challengeFlags) validate(spec *queue.Spec) error {
	switch {
	case len(c.then) == 0:
		return usagef("--then IDENTITY:TO is required with --then-text, --then-after, --accept-duplicate-risk, --then-if-undelivered and --supersedes")
	case len(c.thenText) != len(c.then):
		return usagef("give one --then-text per --then (got %d --then, %d --then-text)", len(c.then), len(c.thenText))
	case len(c.thenAfter) != len(c.then):
		return usagef("give one --then-after per --then (got %d --then, %d --then-after)", len(c.then), len(c.thenAfter))
	case len(c.thenSubject) > len(c.then):
		return usagef("at most one --then-subject per --then")
	case spec.NotBefore != "":
		return usagef("--not-before cannot be combined with --then: a challenge's first step goes out at once")
	case spec.ExpiresIn == "" && spec.ExpiresAt == "":
		return usagef("a challenge needs a deadline: --expires-in or --expires-at")
	}
	for _, t := range c.then {
		if id, to, ok := strings.Cut(t, ":"); !ok || id == "" || to == "" {
			return usagef("--then %q: want IDENTITY:TO, e.g. sms-us:+15551234567", t)
		}
	}
	return nil
}

// params builds the challenge: step 1 is the send the other flags
// describe, each --then a step after it.
func (c *challengeFlags) params(spec *queue.Spec, now time.Time, d queue.Defaults) (store.ChallengeParams, error) {
	steps := make([]queue.Step, len(c.then))
	for i, t := range c.then {
		id, to, _ := strings.Cut(t, ":")
		steps[i] = queue.Step{Identity: id, To: to, Text: c.thenText[i], After: c.thenAfter[i]}
		if i < len(c.thenSubject) {
			steps[i].Subject = c.thenSubject[i]
		}
	}
	return queue.ChallengeParams(spec, steps, c.acceptDup, c.ifUndeliv, c.supersedes, now, d)
}

// challengeResult is what `send -o json` prints for a challenge.
type challengeResult struct {
	*store.Challenge
	Replayed bool `json:"replayed"`
	// Superseded counts the superseded challenge's steps this send canceled.
	Superseded int `json:"superseded_steps"`
}

func runSendChallenge(ctx context.Context, a *app, o *sendOptions) error {
	p, err := o.challenge.params(&o.spec, a.now(), a.sendDefaults(o))
	if err != nil {
		return err
	}
	var res *store.ChallengeResult
	err = a.retryLostConnection(ctx, func() error {
		st, err := a.store(ctx)
		if err != nil {
			return err
		}
		res, err = st.ChallengeEnqueue(ctx, &p)
		return err
	})
	if err != nil {
		return storeopen.RedactErr(a.cfg.Store, err)
	}
	c := res.Challenge
	a.log.Debug("challenge enqueued", "id", c.ID, "key", c.Key, "steps", len(c.Steps), "replayed", res.Replayed)
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, challengeResult{c, res.Replayed, res.Superseded})
	}
	verb := enqueueVerb(res.Replayed, false)
	rows := make([][]string, 0, len(c.Steps))
	for _, s := range c.Steps {
		m := s.Message
		rows = append(rows, []string{strconv.Itoa(s.Step), m.ID, m.Key, m.Identity, string(m.State), m.To, stamp(s.ReleaseAt), verb})
	}
	if err := printTable(a.ios.Out, []string{"STEP", "ID", "KEY", "IDENTITY", "STATE", "TO", "RELEASE AT", "RESULT"}, rows); err != nil {
		return err
	}
	if res.Superseded > 0 {
		fmt.Fprintf(a.ios.Out, "superseded %s: %d step(s) that had not gone out canceled\n", p.Supersedes, res.Superseded)
	}
	return nil
}
