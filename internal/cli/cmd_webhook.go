package cli

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
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

// webhookSecrets reads the configured identities' webhook secrets from the
// environment. An identity whose variables are named but unset here is
// skipped (returned, for one warning each): its deliveries get 401 from
// this process, so its provider retries them, and the other identities'
// webhooks are not held hostage to it. A malformed whsec_ secret is a
// usage error at start-up, not a stream of 401s later.
func webhookSecrets(ids map[string]*identity) (webhook.Config, []skippedIdentity, error) {
	var cfg webhook.Config
	var skipped []skippedIdentity
	names := make([]string, 0, len(ids))
	for n := range ids {
		if miss := ids[n].missingWebhookEnv(); len(miss) > 0 {
			skipped = append(skipped, skippedIdentity{Name: n, Missing: miss})
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Name < skipped[j].Name })
	env := func(id, key, name string) (string, error) {
		v := os.Getenv(name)
		if v == "" {
			return "", usagef("identity %s: environment variable %s (%s) is not set", id, name, key)
		}
		return v, nil
	}
	for _, n := range names {
		ic := ids[n].Config
		if ic.AppSecretEnv != "" {
			v, err := env(n, "app_secret_env", ic.AppSecretEnv)
			if err != nil {
				return cfg, nil, err
			}
			cfg.WhatsApp = append(cfg.WhatsApp, webhook.AppSecret{Identity: n, Secret: []byte(v)})
		}
		if ic.VerifyTokenEnv != "" {
			v, err := env(n, "verify_token_env", ic.VerifyTokenEnv)
			if err != nil {
				return cfg, nil, err
			}
			cfg.VerifyTokens = append(cfg.VerifyTokens, v)
		}
		if ic.WebhookSecretEnv != "" {
			v, err := env(n, "webhook_secret_env", ic.WebhookSecretEnv)
			if err != nil {
				return cfg, nil, err
			}
			hs := webhook.HTTPSecrets{Identity: n}
			for _, f := range strings.Fields(v) {
				s, err := verify.ParseSecret(f)
				if err != nil {
					return cfg, nil, usagef("identity %s: %s (webhook_secret_env) does not hold whsec_ secrets", n, ic.WebhookSecretEnv)
				}
				hs.Secrets = append(hs.Secrets, s)
			}
			if len(hs.Secrets) == 0 {
				return cfg, nil, usagef("identity %s: %s (webhook_secret_env) holds no whsec_ secret", n, ic.WebhookSecretEnv)
			}
			cfg.HTTP = append(cfg.HTTP, hs)
		}
	}
	return cfg, skipped, nil
}

// phoneNumberIDs maps the WhatsApp identities' phone_number_ids to their
// names.
func phoneNumberIDs(ids map[string]*identity) map[string]string {
	out := map[string]string{}
	for n, id := range ids {
		if id.Config.PhoneNumberID != "" {
			out[id.Config.PhoneNumberID] = n
		}
	}
	return out
}

// templateIdentities maps each WhatsApp identity to the identities that
// share its app secret (the same Meta app, so the same business account's
// templates), itself included.
func templateIdentities(ids map[string]*identity) map[string][]string {
	bySecret := map[string][]string{}
	for n, id := range ids {
		if id.Config.AppSecretEnv != "" {
			bySecret[id.Config.AppSecretEnv] = append(bySecret[id.Config.AppSecretEnv], n)
		}
	}
	out := map[string][]string{}
	for _, group := range bySecret {
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
