package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
)

func newWebhookCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Receive, process and replay provider webhooks (statuses and inbound messages)",
		Long: `Providers report what happened to a message (sent, delivered, read, failed) and
pass on customers' replies through webhooks. msgq keeps every delivery raw and
durably before it answers 200, then processes the stored deliveries: statuses are
deduplicated and applied forward only (a late "sent" never undoes "delivered"),
statuses for messages whose provider id is not known yet are parked until it is,
and inbound messages are linked to the message they answer and open the
customer-service window.

` + exitStatusHelp,
		Args: exactArgs(0, "a subcommand (serve, process, replay, parked, suspect, notices, unreadable, show or retry)"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newWebhookServeCmd(a), newWebhookProcessCmd(a), newWebhookReplayCmd(a), newWebhookParkedCmd(a),
		newWebhookSuspectCmd(a), newWebhookNoticesCmd(a), newWebhookUnreadableCmd(a), newWebhookShowCmd(a), newWebhookRetryCmd(a))
	return cmd
}

// webhookRoutes builds, for each configured identity whose webhooks msgq
// receives, its kind's verifier with its secrets read from the environment.
// An identity whose variables are named but unset here is skipped
// (returned, for one warning each): its deliveries get 401 from this
// process, so its provider retries them, and the other identities'
// webhooks are not held hostage to it. A malformed secret (a bad whsec_)
// is a usage error at start-up, not a stream of 401s later.
func webhookRoutes(ids map[string]*identities.Identity) ([]webhook.Route, []identities.Skipped, error) {
	var routes []webhook.Route
	var skipped []identities.Skipped
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		id := ids[n]
		if id.Kind.Webhook == nil || len(id.Settings.WebhookEnv()) == 0 {
			continue
		}
		if miss := id.MissingWebhookEnv(); len(miss) > 0 {
			skipped = append(skipped, identities.Skipped{Name: n, Missing: miss})
			continue
		}
		v, err := id.Kind.Webhook.Verifier(id.Settings, os.Getenv)
		if err != nil {
			return nil, nil, usagef("identity %s: %v", n, oneLine(err.Error()))
		}
		if v == nil {
			continue // nothing to verify with (a verify token alone)
		}
		routes = append(routes, webhook.Route{Identity: n, Kind: id.Kind, Verifier: v})
	}
	return routes, skipped, nil
}

// phoneNumberIDs maps the senders that webhooks name (WhatsApp's
// phone_number_ids) to their identities, for the kinds whose webhooks name
// them.
func phoneNumberIDs(ids map[string]*identities.Identity) map[string]string {
	out := map[string]string{}
	for n, id := range ids {
		if id.Kind.Webhook == nil || !id.Kind.Webhook.NamesSender {
			continue
		}
		if _, v := id.Settings.Sender(); v != "" {
			out[v] = n
		}
	}
	return out
}

// templateIdentities maps each identity on a provider account
// (Settings.Account: for WhatsApp, the app secret, so the same Meta app and
// business account's templates) to the identities that share it, itself
// included.
func templateIdentities(ids map[string]*identities.Identity) map[string][]string {
	byAccount := map[string][]string{}
	for n, id := range ids {
		if acct := id.Settings.Account(); acct != "" {
			key := id.Kind.Name + "\x00" + acct
			byAccount[key] = append(byAccount[key], n)
		}
	}
	out := map[string][]string{}
	for _, group := range byAccount {
		sort.Strings(group)
		for _, n := range group {
			out[n] = group
		}
	}
	return out
}

// processStored processes every stored delivery and pending status, and
// prints what changed.
func processStored(ctx context.Context, a *app, st store.Store) error {
	p := &webhook.Processor{Store: st, PhoneNumberIDs: phoneNumberIDs(a.cfg.Identities),
		TemplateIdentities: templateIdentities(a.cfg.Identities), Log: a.log}
	sum, err := p.Once(ctx)
	if err != nil {
		return err
	}
	return printProcessSummary(a, sum)
}

// printProcessSummary prints what processing did: a line on stderr, the
// changes on stdout (a table, or the summary as JSON).
func printProcessSummary(a *app, sum webhook.Summary) error {
	fmt.Fprintf(a.ios.Err, "webhook: %d deliveries (%d unreadable), %d new statuses, %d new inbound, %d duplicates; applied %d, recorded %d, refused %d, suspect %d, inbound linked %d, parked %d, held texts released %d\n",
		sum.Events, sum.Unreadable, sum.Statuses, sum.Inbound, sum.Duplicates, sum.Applied, sum.Recorded, sum.Refused, sum.Suspect, sum.Attributed, sum.Parked, sum.Released)
	if sum.Notices > 0 || sum.TemplateReleased > 0 {
		fmt.Fprintf(a.ios.Err, "webhook: %d new notices (msgq webhook notices); identities paused %d; template holds: %d rows held, %d released\n",
			sum.Notices, sum.PausedIdentities, sum.TemplateHeld, sum.TemplateReleased)
	}
	if a.cfg.Output == outJSON {
		if sum.Changes == nil {
			sum.Changes = []store.AppliedEvidence{}
		}
		return printJSON(a.ios.Out, sum)
	}
	if len(sum.Changes) == 0 {
		return nil
	}
	rows := make([][]string, 0, len(sum.Changes))
	for _, c := range sum.Changes {
		rows = append(rows, []string{c.MessageID, string(c.Status), string(c.From), string(c.To), c.Outcome, c.Detail})
	}
	return printTable(a.ios.Out, []string{"ID", "STATUS", "FROM", "TO", "OUTCOME", "DETAIL"}, rows)
}
