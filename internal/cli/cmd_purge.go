package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

// parseAge reads a Go duration (90m, 36h) or a number of days with an
// optional Go duration after it (90d, 1d12h). Negative ages are refused.
func parseAge(s string) (time.Duration, error) {
	const day = 24 * time.Hour
	bad := errors.New("want a duration like 90d, 36h or 30m")
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("must not be negative")
	}
	var total time.Duration
	// No Go duration unit has a d, so a d can only end the days.
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 63)
		if err != nil || n > uint64(math.MaxInt64/day) {
			return 0, bad
		}
		if total, s = time.Duration(n)*day, rest; s == "" {
			return total, nil
		}
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, bad
	case d < 0:
		return 0, errors.New("must not be negative")
	case total > math.MaxInt64-d:
		return 0, errors.New("too long")
	}
	return total + d, nil
}

type purgeOptions struct {
	olderThan string
	purpose   string
	dryRun    bool
}

// params validates the options and turns them into store parameters.
func (o *purgeOptions) params(now time.Time, cfg *config) (*store.PurgeParams, error) {
	if o.olderThan == "" {
		return nil, usagef("--older-than is required (e.g. --older-than 90d)")
	}
	age, err := parseAge(o.olderThan)
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
	Before   time.Time `json:"before"` // rows created before this
	Tenant   string    `json:"tenant"`
	Purpose  string    `json:"purpose"` // "" for every purpose
}

func newPurgeCmd(a *app) *cobra.Command {
	o := &purgeOptions{}
	cmd := &cobra.Command{
		Use:   "purge --older-than D",
		Short: "Retention: drop the payloads of old finished messages, keep their keys",
		Long: `Drop the payload, the last error and the attempts' raw error bodies of finished
messages (sent, delivered, read, failed) created more than D ago. The row stays
with its tenant, key, body hash, state and history: a send that replays an old
key is still answered as a replay (or refused as a conflict), never sent again.
Rows not finished (queued, sending, unknown) are never purged.

D is a Go duration (36h, 90m) or a number of days (90d, 1d12h). --older-than 0s
purges every finished row. The purge runs in batches of short transactions, so
drains and senders are not held up; one that is interrupted can be run again.
--dry-run counts what would be purged and writes nothing. Only the tenant of
--tenant (default "default") is purged.

` + exitStatusHelp,
		Example: `  msgq purge --older-than 90d --dry-run
  msgq purge --older-than 30d --purpose marketing -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := o.params(a.now(), a.cfg)
			if err != nil {
				return err
			}
			return runPurge(cmd.Context(), a, p)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.olderThan, "older-than", "", "purge finished rows created more than `D` ago (e.g. 90d, 36h)")
	f.StringVar(&o.purpose, "purpose", "", "only rows with this purpose")
	f.BoolVar(&o.dryRun, "dry-run", false, "count what would be purged; write nothing")
	f.String("tenant", "", "tenant (default \"default\") [MSGQ_TENANT]")
	return cmd
}

func runPurge(ctx context.Context, a *app, p *store.PurgeParams) error {
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
	return printJSONOrLine(a, res, line)
}

// nMessages is "1 message" or "N messages".
func nMessages(n int) string {
	if n == 1 {
		return "1 message"
	}
	return strconv.Itoa(n) + " messages"
}
