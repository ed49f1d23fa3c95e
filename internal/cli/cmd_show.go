package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newShowCmd(a *app) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "show ID|KEY",
		Short: "Show one message: the row, every state change, every attempt, the last error verbatim",
		Long: `Show one message by id or by key: the row, every state change (history), every
provider call (attempts), and the last error exactly as the provider sent it.
-o json prints one object with "history" and "attempts" arrays.

` + exitStatusHelp,
		Example: `  msgq show order-1001-shipped
  msgq show 01JD5Q3XK0M9T4W8Y2B6C1N7PZ -o json`,
		Args: exactArgs(1, "one message id or key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShow(cmd.Context(), a, args[0])
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant of the key (default \"default\") [MSGQ_TENANT]")
	return cmd
}

// showResult is what `show -o json` prints. Its "attempts" is the array of
// provider calls (the contract), which shadows the row's count of them; the
// count is "attempt_count" here.
type showResult struct {
	*store.Message
	AttemptCount int                  `json:"attempt_count"`
	History      []store.HistoryEntry `json:"history"`
	Attempts     []store.Attempt      `json:"attempts"`
	// Inbound is what the customer sent about this message (replies,
	// reactions), newest first.
	Inbound []store.Inbound `json:"inbound"`
	// SMS is the text's segment count, for SMS rows with a text.
	SMS *smsInfo `json:"sms,omitempty"`
	// Challenge is the verification challenge the row is a step of
	// (docs/challenges.md), with every step; absent for a single send.
	Challenge *store.Challenge `json:"challenge,omitempty"`
}

func runShow(ctx context.Context, a *app, ref string) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	m, err := st.MessageGet(ctx, a.cfg.Tenant, ref)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no message with id or key %q in tenant %q: %w", ref, a.cfg.Tenant, err)
	}
	if err != nil {
		return err
	}
	r, err := showOf(ctx, st, m)
	if err != nil {
		return err
	}
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, r)
	}
	if err := printShow(a, m, r.History, r.Attempts, r.Inbound); err != nil {
		return err
	}
	if r.Challenge != nil {
		return printChallenge(a, r.Challenge)
	}
	return nil
}

// showOf reads everything show says of m. It is also what msgq serve's
// GET /v1/messages answers, so the API and -o json have one shape.
func showOf(ctx context.Context, st store.Store, m *store.Message) (*showResult, error) {
	hist, err := st.MessageHistory(ctx, m.ID)
	if err != nil {
		return nil, err
	}
	atts, err := st.MessageAttempts(ctx, m.ID)
	if err != nil {
		return nil, err
	}
	in, err := st.InboxList(ctx, &store.InboxParams{MessageID: m.ID})
	if err != nil {
		return nil, err
	}
	ch, err := st.ChallengeGet(ctx, m.Tenant, m.ID)
	if errors.Is(err, store.ErrNotFound) {
		ch, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &showResult{m, m.Attempts, hist, atts, in, smsCost(m), ch}, nil
}

// printChallenge shows the challenge a row is a step of: where it stands
// and, for each step, whether and why it went out.
func printChallenge(a *app, c *store.Challenge) error {
	w := a.ios.Out
	fmt.Fprintln(w, "\nCHALLENGE")
	outcome := c.Outcome
	switch {
	case c.By > 0:
		outcome += " by step " + strconv.Itoa(c.By)
	case c.Outcome == "open" && c.Blocked > 0:
		outcome += ", blocked by step " + strconv.Itoa(c.Blocked)
	}
	opts := []string{}
	if c.AcceptDuplicateRisk {
		opts = append(opts, "accept-duplicate-risk")
	}
	if c.FallbackUndelivered {
		opts = append(opts, "then-if-undelivered")
	}
	if err := printTable(w, nil, [][]string{{"key:", c.Key}, {"outcome:", outcome}, {"why:", orDash(c.Why)},
		{"deadline:", stampPtr(c.Deadline)}, {"next decision:", stampPtr(c.NextAt)}, {"options:", orDash(strings.Join(opts, ", "))},
		{"supersedes:", orDash(c.Supersedes)}}); err != nil {
		return err
	}
	rows := make([][]string, 0, len(c.Steps))
	for _, s := range c.Steps {
		m := s.Message
		st := stateLabel(&m)
		released := "no"
		if s.Released {
			released = "yes"
		}
		rows = append(rows, []string{strconv.Itoa(s.Step), m.Key, m.Identity, m.To, st, stamp(s.ReleaseAt), released, orDash(s.Why)})
	}
	return printTable(w, []string{"STEP", "KEY", "IDENTITY", "TO", "STATE", "RELEASE AT", "RELEASED", "WHY"}, rows)
}

// maybeSentLabel spells out the flag: an operator deciding on a resend must
// see that an earlier call's answer was lost.
func maybeSentLabel(maybe bool) string {
	if maybe {
		return "yes (an earlier call's answer was lost: it may have reached the phone)"
	}
	return "no"
}

func printShow(a *app, m *store.Message, hist []store.HistoryEntry, atts []store.Attempt, in []store.Inbound) error {
	w := a.ios.Out
	content := "-"
	if p := m.Payload; p != nil {
		if p.Text != "" {
			content = fmt.Sprintf("text %q", p.Text)
			if p.Subject != "" {
				// An email: its subject first, as a mail reader shows it;
				// the HTML alternative is in -o json.
				content = fmt.Sprintf("subject %q, %s", p.Subject, content)
				if p.HTML != "" {
					content += " (and an HTML part)"
				}
			}
			if p.FallbackTemplate != "" {
				content += " (fallback template " + p.FallbackTemplate + ")"
			}
		} else {
			content = fmt.Sprintf("template %s (%s) %q", p.Template, p.Lang, p.Params)
		}
	} else {
		content = "(purged)"
	}
	lease := "-"
	if m.LeaseOwner != "" {
		lease = m.LeaseOwner + " until " + stampPtr(m.LeaseUntil)
	}
	fields := [][]string{
		{"id:", m.ID}, {"key:", m.Key}, {"tenant:", m.Tenant}, {"state:", stateLabel(m)},
		{"to:", m.To}, {"channel:", m.Channel}, {"identity:", m.Identity}, {"lane:", m.Lane},
		{"purpose:", orDash(m.Purpose)}, {"ref:", orDash(m.TriggerRef)}, {"content:", content},
	}
	if c := smsCost(m); c != nil {
		fields = append(fields, []string{"sms:", c.String()})
	}
	fields = append(fields, [][]string{
		{"maybe sent:", maybeSentLabel(m.MaybeSent)},
		{"attempts:", strconv.Itoa(m.Attempts)}, {"next attempt:", stamp(m.NextAttemptAt)},
		{"expires:", stampPtr(m.ExpiresAt)}, {"lease:", lease}, {"provider id:", orDash(m.ProviderID)},
		{"resend of:", orDash(m.ResendOf)}, {"resolution:", orDash(m.Resolution)},
		{"body hash:", m.BodyHash}, {"created:", stamp(m.CreatedAt)}, {"updated:", stamp(m.UpdatedAt)},
	}...)
	if err := printTable(w, nil, fields); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nHISTORY")
	rows := make([][]string, 0, len(hist))
	for _, h := range hist {
		to := string(h.To)
		if h.Reason != "" {
			to += "(" + string(h.Reason) + ")"
		}
		if !h.Applied {
			to += " [not applied]"
		}
		rows = append(rows, []string{stamp(h.At), orDash(string(h.From)), to, h.Event, h.Source, orDash(h.Detail)})
	}
	if err := printTable(w, []string{"AT", "FROM", "TO", "EVENT", "SOURCE", "DETAIL"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nATTEMPTS")
	if len(atts) == 0 {
		fmt.Fprintln(w, "none")
	} else {
		rows = rows[:0]
		for _, at := range atts {
			rows = append(rows, []string{strconv.Itoa(at.Number), stamp(at.StartedAt), at.Class,
				strconv.Itoa(at.HTTPStatus), orDash(at.ProviderCode), orDash(at.ProviderSubcode), at.Latency.String()})
		}
		if err := printTable(w, []string{"#", "STARTED", "CLASS", "HTTP", "CODE", "SUBCODE", "LATENCY"}, rows); err != nil {
			return err
		}
	}
	if len(in) > 0 {
		// Replies and reactions: what the customer said about it.
		fmt.Fprintln(w, "\nINBOUND")
		rows = rows[:0]
		for _, i := range in {
			text := i.Text
			if i.ReplyID != "" {
				text = i.ReplyTitle + " [" + i.ReplyID + "]"
			}
			rows = append(rows, []string{stamp(i.ReceivedAt), i.Type, orDash(oneLine(text))})
		}
		if err := printTable(w, []string{"RECEIVED", "TYPE", "TEXT"}, rows); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nLAST ERROR")
	if m.LastError == "" {
		fmt.Fprintln(w, "none")
		return nil
	}
	// Verbatim: never paraphrase (or trim) a provider's error.
	if _, err := fmt.Fprint(w, m.LastError); err != nil {
		return err
	}
	if !strings.HasSuffix(m.LastError, "\n") {
		_, err := fmt.Fprintln(w)
		return err
	}
	return nil
}
