package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/store"
)

type purgeOptions struct {
	olderThan string
	purpose   string
	dryRun    bool
	// tenantFlag is whether --tenant was given.
	tenantFlag bool
}

// webhooks says whether the purge also takes webhook data. Webhooks have
// no tenant and no purpose, so a purge scoped by either (--purpose,
// --tenant, or a tenant other than the default from MSGQ_TENANT or the
// config file) is about some messages only and must not drop every
// tenant's webhook data.
func (o *purgeOptions) webhooks(cfg *config) bool {
	return o.purpose == "" && !o.tenantFlag && cfg.Tenant == settingDefault("tenant")
}

// settingDefault is the default of a config key (settings in config.go).
func settingDefault(key string) string {
	for _, s := range settings {
		if s.key == key {
			return s.def
		}
	}
	return ""
}

// params validates the options and turns them into store parameters.
func (o *purgeOptions) params(now time.Time, cfg *config) (*store.PurgeParams, error) {
	if o.olderThan == "" {
		return nil, usagef("--older-than is required (e.g. --older-than 90d)")
	}
	age, err := duration.ParseAge(o.olderThan)
	if err != nil {
		return nil, usagef("--older-than %q: %v", o.olderThan, err)
	}
	return &store.PurgeParams{Before: now.Add(-age), Purpose: o.purpose, Tenant: cfg.Tenant, DryRun: o.dryRun}, nil
}

// purgeResult is what `purge -o json` prints. Field names are a JSON
// contract.
type purgeResult struct {
	Messages int       `json:"messages"` // purged, or with dry_run would be
	DryRun   bool      `json:"dry_run"`
	Before   time.Time `json:"before"` // rows created (webhook data received) before this
	Tenant   string    `json:"tenant"`
	Purpose  string    `json:"purpose"` // "" for every purpose
	// WebhookEvents and InboundTexts count the raw webhook deliveries
	// deleted and the inbound texts blanked (or with dry_run would be);
	// null when the purge was scoped by tenant or purpose and so left
	// webhook data alone: a script can tell "none" from "not looked at".
	WebhookEvents *int `json:"webhook_events"`
	InboundTexts  *int `json:"inbound_texts"`
	// StatusEvents counts the delivered or dead status events to the
	// applications' endpoints deleted (docs/events.md): they carry the
	// customer's address too.
	StatusEvents int `json:"status_events"`
}

func newPurgeCmd(a *app) *cobra.Command {
	o := &purgeOptions{}
	cmd := &cobra.Command{
		Use:   "purge --older-than D",
		Short: "Retention: drop the payloads of old finished messages (keep their keys) and old webhook data",
		Long: `Drop the payload, the last error and the attempts' raw error bodies of finished
messages (sent, delivered, read, failed) created more than D ago. The row stays
with its tenant, key, body hash, state and history: a send that replays an old
key is still answered as a replay (or refused as a conflict), never sent again.
Rows not finished (intake, queued, sending, unknown) are never purged.

Webhook data older than D goes too, as it is customer data:
  - raw webhook deliveries processed without an error are deleted. A delivery
    processing could not read, or not processed yet, is kept whatever its age
    (msgq stats counts the unreadable ones): someone still needs its body;
  - inbound messages lose their text and button title. The row keeps its ids,
    sender, reply id and the message it answers, so a redelivery is still a
    duplicate and replies stay attributed.
Status events to the applications' endpoints (docs/events.md) written more
than D ago are deleted once delivered or dead (they carry the customer's
address); pending ones are kept. They are the tenant's (and, with --purpose,
that purpose's messages').
Statuses read from webhooks are kept. Webhook data has no tenant and no
purpose, so it is purged only when neither --tenant nor --purpose is given
(nor a tenant other than "default" by MSGQ_TENANT or the config file): those
scope the purge to some messages.

D is a Go duration (36h, 90m) or a number of days (90d, 1d12h). --older-than 0s
purges every finished row and all webhook data it may. The purge runs in
batches of short transactions, so drains, senders and webhooks are not held up;
one that is interrupted can be run again. --dry-run counts what would be purged
and writes nothing. Only the tenant of --tenant (default "default") is purged.

` + exitStatusHelp,
		Example: `  msgq purge --older-than 90d --dry-run
  msgq purge --older-than 30d --purpose marketing -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := o.params(a.now(), a.cfg)
			if err != nil {
				return err
			}
			o.tenantFlag = cmd.Flags().Changed("tenant")
			return runPurge(cmd.Context(), a, p, o.webhooks(a.cfg))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.olderThan, "older-than", "", "purge finished rows created (and webhook data received) more than `D` ago (e.g. 90d, 36h)")
	f.StringVar(&o.purpose, "purpose", "", "only rows with this purpose (webhook data is then kept)")
	f.BoolVar(&o.dryRun, "dry-run", false, "count what would be purged; write nothing")
	f.String("tenant", "", "tenant (default \"default\"; given, webhook data is kept) [MSGQ_TENANT]")
	return cmd
}

func runPurge(ctx context.Context, a *app, p *store.PurgeParams, webhooks bool) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	n, err := st.MessagePurge(ctx, p)
	if err != nil {
		return err
	}
	res := purgeResult{Messages: n, DryRun: p.DryRun, Before: p.Before.UTC(), Tenant: p.Tenant, Purpose: p.Purpose}
	verb := "purged"
	if p.DryRun {
		verb = "would purge"
	}
	scope := "finished"
	if p.Purpose != "" {
		scope += ", purpose " + p.Purpose
	}
	line := fmt.Sprintf("%s %s (%s, tenant %s, created before %s)", verb, nMessages(n), scope, p.Tenant, stamp(p.Before))
	ev, err := st.EventPurge(ctx, p)
	if err != nil {
		fmt.Fprintln(a.ios.Err, line)
		return err
	}
	res.StatusEvents = ev
	line += fmt.Sprintf("\n%s %s (delivered or dead, written before %s)", verb, plural(ev, "status event"), stamp(p.Before))
	if webhooks {
		// The same bound and dry run: one retention age for all the
		// customer data the store keeps.
		w, err := st.WebhookPurge(ctx, p)
		if err != nil {
			// The messages' purge is committed (and so are the webhook
			// batches before the error): say what was done.
			fmt.Fprintln(a.ios.Err, line)
			return err
		}
		res.WebhookEvents, res.InboundTexts = &w.Events, &w.Inbound
		line += fmt.Sprintf("\n%s %s and %s (webhook data received before %s)", verb,
			plural(w.Events, "webhook event"), plural(w.Inbound, "inbound text"), stamp(p.Before))
	} else {
		line += "\nwebhook data kept: it has no tenant or purpose, and this purge is scoped to some (--tenant, --purpose, MSGQ_TENANT or the config's tenant)"
	}
	return printJSONOrLine(a, res, line)
}

// plural is "1 thing" or "N things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// nMessages is "1 message" or "N messages".
func nMessages(n int) string {
	if n == 1 {
		return "1 message"
	}
	return strconv.Itoa(n) + " messages"
}
