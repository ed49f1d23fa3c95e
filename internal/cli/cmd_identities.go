package cli

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/store"
)

// identityRow is one line of `msgq identities`. Field names are a JSON
// contract.
type identityRow struct {
	Name         string     `json:"name"`
	Provider     string     `json:"provider"`
	Configured   bool       `json:"configured"`
	Rate         string     `json:"rate"`
	PerRecipient string     `json:"per_recipient_interval"`
	Paused       bool       `json:"paused"`
	Reason       string     `json:"paused_reason"`
	PausedAt     *time.Time `json:"paused_at"`
	Queued       int        `json:"queued"`
	Sending      int        `json:"sending"`
	Unknown      int        `json:"unknown"`
	// ServiceWindow is the customer-service window enforced on free-form
	// text ("off" when none), and Webhooks the endpoint whose deliveries
	// this identity verifies ("" when none).
	ServiceWindow string `json:"service_window"`
	Webhooks      string `json:"webhooks"`
	// Channels are the channels it sends on, its default first. Rate and
	// PerRecipient are the limits in force ("off" when none); the
	// *Default fields say they are the provider's defaults (WhatsApp's
	// 80/s and 6s), not the config's.
	Channels            []string `json:"channels"`
	RateDefault         bool     `json:"rate_default"`
	PerRecipientDefault bool     `json:"per_recipient_default"`
	// SendsHere says this process has what the identity needs to send
	// (its token); MissingEnv names the environment variables it lacks,
	// webhook secrets included. A drain elsewhere may have them: drains
	// here skip the identity and its rows stay queued.
	SendsHere  bool     `json:"sends_here"`
	MissingEnv []string `json:"missing_env"`
	// LastNotice is the latest thing the provider said about the
	// identity rather than a message (an account-level error, a quality
	// or account update), "" when none; TemplateHolds the templates
	// reported unusable for it, whose queued rows wait.
	LastNotice    string   `json:"last_notice"`
	TemplateHolds []string `json:"template_holds"`
	// DailyRecipientsLimit is the daily unique-recipient limit (0: none)
	// and DailyRecipientsUsed the unique recipients the identity was
	// claimed for within the last 24 hours (counted only while a limit
	// is set). QuietHours is its quiet window ("off" when none) and
	// QuietZone the zone for recipients without one of their own.
	DailyRecipientsLimit int    `json:"daily_recipients_limit"`
	DailyRecipientsUsed  int    `json:"daily_recipients_used"`
	QuietHours           string `json:"quiet_hours"`
	QuietZone            string `json:"quiet_zone"`
}

func newIdentitiesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "identities",
		Short: "Sending identities: their pacing, queues, and whether a provider error paused them",
		Long: `List the sending identities: those in the config file (and the built-in sim), and
any the store has rows or a pause for. An identity-class provider error (token
expired, account blocked) pauses the identity: its rows stay queued until
'msgq identities resume NAME'.

CHANNELS are the channels an identity sends on (its default first). RATE and
PER-RECIPIENT are the pacing limits in force; "(default)" marks WhatsApp's own
limits (80/s per number, one message per 6s to one user), which a whatsapp
identity gets unless its config sets rate or per_recipient_interval (off turns
one off). SENDS HERE says whether this process has the identity's token: a drain
without it skips the identity, whose rows stay queued for a drain that has it
(msgq health --max-unsendable alerts on them). An identity the store has rows
for but the config does not name shows as not configured: no drain sends them.
DAILY, shown when some identity has daily_recipients, is its use, USED/LIMIT:
the recipients claimed within the last 24 hours against the limit (msgq health
--max-daily-recipients-share alerts near it); "-" for identities without one.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments (or the pause/resume subcommands)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			states, err := st.IdentityStates(cmd.Context())
			if err != nil {
				return err
			}
			rows := map[string]*identityRow{}
			for n, id := range a.cfg.Identities {
				rows[n] = &identityRow{Name: n, Provider: id.Config.Provider, Configured: true, Rate: id.Rate,
					PerRecipient: id.PerRecipient, ServiceWindow: "off", Channels: id.Channels,
					RateDefault: id.RateDefault, PerRecipientDefault: id.PerRecipientDefault,
					SendsHere: len(id.MissingSendEnv()) == 0, MissingEnv: append(append([]string{}, id.MissingSendEnv()...), id.MissingWebhookEnv()...)}
				if id.Window > 0 {
					rows[n].ServiceWindow = id.Window.String()
				}
				rows[n].DailyRecipientsLimit, rows[n].QuietHours = id.DailyRecipients, identities.Off
				if w := id.Quiet.Window; w != nil {
					rows[n].QuietHours, rows[n].QuietZone = w.String(), id.Quiet.Zone.String()
				}
				rows[n].Webhooks = id.WebhookPath()
			}
			for _, s := range states {
				r := rows[s.Name]
				if r == nil {
					r = &identityRow{Name: s.Name, Channels: []string{}, MissingEnv: []string{}}
					rows[s.Name] = r
				}
				r.Paused, r.Reason, r.PausedAt, r.Queued, r.Sending, r.Unknown = s.Paused, s.Reason, s.PausedAt, s.Queued, s.Sending, s.Unknown
			}
			if err := identityNotices(cmd.Context(), st, rows); err != nil {
				return err
			}
			if err := dailyUse(cmd.Context(), st, rows); err != nil {
				return err
			}
			out := sortedRows(rows)
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, out)
			}
			// The DAILY column shows only when some identity has a limit:
			// tables of queues without one read as they always did.
			anyDaily := slices.ContainsFunc(out, func(r identityRow) bool { return r.DailyRecipientsLimit > 0 })
			table := make([][]string, 0, len(out))
			for _, r := range out {
				paused := "no"
				if r.Paused {
					paused = "yes: " + r.Reason
				}
				prov, here := r.Provider, "yes"
				switch {
				case !r.Configured:
					prov, here = "(not configured)", "no: not configured"
				case !r.SendsHere:
					here = "no: " + strings.Join(r.MissingEnv, ", ") + " unset"
				case len(r.MissingEnv) > 0:
					here = "yes (webhooks: " + strings.Join(r.MissingEnv, ", ") + " unset)"
				}
				rate, per := r.Rate, r.PerRecipient
				if r.RateDefault {
					rate += " (default)"
				}
				if r.PerRecipientDefault {
					per += " (default)"
				}
				notice := strings.Join(append(slices.Clone(r.TemplateHolds), r.LastNotice), "; ")
				daily := "-"
				if r.DailyRecipientsLimit > 0 {
					daily = fmt.Sprintf("%d/%d", r.DailyRecipientsUsed, r.DailyRecipientsLimit)
				}
				table = append(table, []string{r.Name, prov, orDash(strings.Join(r.Channels, ",")), orDash(rate), orDash(per),
					strconv.Itoa(r.Queued), strconv.Itoa(r.Sending), strconv.Itoa(r.Unknown), paused, here, orDash(strings.Trim(notice, "; "))})
				if anyDaily {
					row := table[len(table)-1]
					table[len(table)-1] = slices.Insert(row, 5, daily)
				}
			}
			head := []string{"NAME", "PROVIDER", "CHANNELS", "RATE", "PER-RECIPIENT", "QUEUED", "SENDING", "UNKNOWN",
				"PAUSED", "SENDS HERE", "NOTICE"}
			if anyDaily {
				head = slices.Insert(head, 5, "DAILY")
			}
			return printTable(a.ios.Out, head, table)
		},
	}
	var reason string
	pause := &cobra.Command{
		Use:   "pause NAME",
		Short: "Stop claims for an identity (its rows stay queued)",
		Args:  exactArgs(1, "one identity name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Pausing a name no drain sends for would stop nothing, and a
			// typo would look like a pause that worked.
			if _, ok := a.cfg.Identities[args[0]]; !ok {
				return identities.Unknown(args[0], a.cfg.Identities)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := st.IdentityPause(cmd.Context(), args[0], "operator: "+reason); err != nil {
				return err
			}
			return printJSONOrLine(a, map[string]any{"name": args[0], "paused": true}, "identity "+args[0]+" paused")
		},
	}
	pause.Flags().StringVar(&reason, "reason", "paused by hand", "why (shown in msgq identities)")
	resume := &cobra.Command{
		Use:   "resume NAME",
		Short: "Let claims for an identity start again",
		Args:  exactArgs(1, "one identity name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !store.ValidKey(args[0]) {
				return identities.Unknown(args[0], a.cfg.Identities)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			// An identity since removed from the config may still be
			// paused in the store: resuming it is allowed, a name the
			// store has never heard of is a typo.
			if _, ok := a.cfg.Identities[args[0]]; !ok {
				states, err := st.IdentityStates(cmd.Context())
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(states, func(s store.IdentityState) bool { return s.Name == args[0] }) {
					return identities.Unknown(args[0], a.cfg.Identities)
				}
			}
			if err := st.IdentityResume(cmd.Context(), args[0]); err != nil {
				return err
			}
			return printJSONOrLine(a, map[string]any{"name": args[0], "paused": false}, "identity "+args[0]+" resumed")
		},
	}
	cmd.AddCommand(pause, resume)
	return cmd
}

// dailyUse fills the daily unique-recipient use of the identities that
// have a limit.
func dailyUse(ctx context.Context, st store.Store, rows map[string]*identityRow) error {
	var limited []string
	for n, r := range rows {
		if r.DailyRecipientsLimit > 0 {
			limited = append(limited, n)
		}
	}
	if len(limited) == 0 {
		return nil
	}
	used, err := st.DailyRecipientsUsed(ctx, limited)
	if err != nil {
		return err
	}
	for _, n := range limited {
		rows[n].DailyRecipientsUsed = used[n]
	}
	return nil
}

// identityNotices fills each row's latest notice and template holds.
func identityNotices(ctx context.Context, st store.Store, rows map[string]*identityRow) error {
	holds, err := st.TemplateHolds(ctx)
	if err != nil {
		return err
	}
	for _, h := range holds {
		r := rows[h.Identity]
		if r == nil {
			r = &identityRow{Name: h.Identity}
			rows[h.Identity] = r
		}
		r.TemplateHolds = append(r.TemplateHolds, fmt.Sprintf("template %s (%s) %s: %d held", h.Template, h.Lang, h.Status, h.Held))
	}
	ns, err := st.NoticeList(ctx, "", 500)
	if err != nil {
		return err
	}
	for _, n := range ns { // newest first
		r := rows[n.Identity]
		if r == nil || r.LastNotice != "" || n.Kind == store.NoticeTemplate || n.Kind == store.NoticeUnknown {
			continue
		}
		r.LastNotice = noticeLine(&n)
	}
	for _, r := range rows {
		if r.TemplateHolds == nil {
			r.TemplateHolds = []string{}
		}
	}
	return nil
}

// noticeLine says what a notice is in a few words, with when it came.
func noticeLine(n *store.Notice) string {
	parts := []string{n.Kind}
	for _, p := range []string{n.Code, n.Subject, n.Lang, n.Value} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " ") + " at " + stamp(n.ReceivedAt)
}

func sortedRows(rows map[string]*identityRow) []identityRow {
	out := make([]identityRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// printJSONOrLine prints v with -o json, else one line for people.
func printJSONOrLine(a *app, v any, line string) error {
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, v)
	}
	_, err := a.ios.Out.Write([]byte(line + "\n"))
	return err
}
