package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type listOptions struct {
	state, to, region, purpose, keyPrefix, since, tenant, before string
	limit                                                        int
}

// params validates the filters and turns them into store parameters.
func (o *listOptions) params(now time.Time, cfg *config) (*store.ListParams, error) {
	p := &store.ListParams{Tenant: cfg.Tenant, Purpose: o.purpose, KeyPrefix: o.keyPrefix, Before: o.before, Limit: o.limit}
	if o.limit <= 0 {
		return nil, usagef("--limit must be positive")
	}
	if o.state != "" {
		s, err := state.Parse(o.state)
		if err != nil {
			return nil, usagef("--state: %v", err)
		}
		p.State = s
	}
	if o.to != "" {
		to, err := addressFlag("--to", o.to, o.region, cfg)
		if err != nil {
			return nil, err
		}
		p.To = to
	}
	if o.keyPrefix != "" && !store.ValidKey(o.keyPrefix) {
		return nil, usagef("--key-prefix %q: keys are made of A-Za-z0-9._:-", o.keyPrefix)
	}
	if o.since != "" {
		t, err := parseSince(o.since, now)
		if err != nil {
			return nil, usagef("--since: %v", err)
		}
		p.Since = t
	}
	return p, nil
}

// addressFlag normalises a recipient given to flag name the way the store
// keeps it: an email address (it has an @) as internal/recipient writes
// one, else a phone number, a local one read as one of region (the flag,
// else the configured region).
func addressFlag(name, v, region string, cfg *config) (string, error) {
	if region == "" {
		region = cfg.Region
	}
	channel := recipient.SMS
	if strings.Contains(v, "@") {
		channel = recipient.Email
	}
	n, err := recipient.Normalize(channel, v, region)
	if err != nil {
		return "", usagef("%s: %v", name, err)
	}
	return n, nil
}

// parseSince reads an RFC 3339 time or a duration ago ("1h": the last hour).
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := duration.Parse(v); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	return parseWhen(v, now)
}

func newListCmd(a *app) *cobra.Command {
	o := &listOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List messages, newest first",
		Long: `List messages, newest first, filtered by state, recipient, purpose, key prefix
and creation time. -o json prints an array of rows.

At most --limit rows are printed (100 by default). When more match, a line on
stderr says how many more and how to see them: the same command with
--before set to the id of the last row printed gives the next page.

` + exitStatusHelp,
		Example: `  msgq list --state unknown
  msgq list --key-prefix order-1001 --since 24h -o json
  msgq list --state failed --before 01JD5Q3XK0M9T4W8Y2B6C1N7PZ   # the next page`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := o.params(a.now(), a.cfg)
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, p)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.state, "state", "", "only rows in this state (intake, queued, sending, unknown, sent, failed, delivered, read)")
	f.StringVar(&o.to, "to", "", "only rows to this recipient")
	f.StringVar(&o.region, "region", "", "ISO country code for a local --to number [MSGQ_REGION]")
	f.StringVar(&o.purpose, "purpose", "", "only rows with this purpose")
	f.StringVar(&o.keyPrefix, "key-prefix", "", "only rows whose key starts with this")
	f.StringVar(&o.since, "since", "", "only rows created since this RFC 3339 time, or this long ago (e.g. 24h)")
	f.IntVar(&o.limit, "limit", store.DefaultListLimit, "at most this many rows")
	f.StringVar(&o.before, "before", "", "only rows older than the row with this id (the next page: the last id printed)")
	f.StringVar(&o.tenant, "tenant", "", "tenant (default \"default\") [MSGQ_TENANT]")
	return cmd
}

func runList(ctx context.Context, a *app, p *store.ListParams) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	ms, err := st.MessageList(ctx, p)
	if err != nil {
		return err
	}
	if len(ms) == p.Limit {
		if err := sayMore(ctx, a, st, p, ms[len(ms)-1].ID); err != nil {
			return err
		}
	}
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, ms)
	}
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, []string{m.ID, m.Key, stateLabel(&m), m.To, m.Identity, orDash(m.Purpose),
			strconv.Itoa(m.Attempts), stamp(m.CreatedAt), stamp(m.UpdatedAt)})
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "STATE", "TO", "IDENTITY", "PURPOSE", "ATTEMPTS", "CREATED", "UPDATED"}, rows)
}

// countUpTo bounds the count behind "N more": past it, list says "more
// than N" rather than scan a huge table to the end.
const countUpTo = 100000

// sayMore tells, on stderr, how many rows after the page match too and how
// to page to them. A full page with nothing after it says nothing.
func sayMore(ctx context.Context, a *app, st store.Store, p *store.ListParams, last string) error {
	rest := *p
	rest.Before = last
	n, err := st.MessageCount(ctx, &rest, countUpTo)
	if err != nil || n == 0 {
		return err
	}
	more := strconv.Itoa(n)
	if n >= countUpTo {
		more = "more than " + strconv.Itoa(countUpTo-1)
	}
	fmt.Fprintf(a.ios.Err, "list: %d rows shown, %s more; the next page: the same command with --before %s (or a larger --limit)\n",
		p.Limit, more, last)
	return nil
}

// stateLabel is the state with its failure reason, e.g. failed(expired).
func stateLabel(m *store.Message) string {
	if m.Reason != state.NoReason {
		return string(m.State) + "(" + string(m.Reason) + ")"
	}
	return string(m.State)
}
