package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/store"
)

func newHealthCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check the vital signs against thresholds; exit 4 when one is crossed (for cron)",
		Long: `Check the queue's vital signs (see msgq stats) against thresholds and exit 4
when any is crossed, with one line per crossed threshold on stderr: a cron job
or a monitoring check alerts on the exit status. Stdout gets the checks in a
table, or -o json.

Thresholds come from flags, MSGQ_HEALTH_* environment variables
(MSGQ_HEALTH_MAX_STUCK, ...) or the config file's health: section; at least one
is required. Each is the most that is still healthy:

  --max-oldest-queued D       the oldest eligible queued row has been due for at
                              most D (a Go duration, or days: 1d). It grows when
                              drains stop, fall behind or cannot reach a provider
  --max-stuck N               rows in sending past their lease plus rows in unknown
  --max-unknown N             rows in unknown
  --max-sending-past-lease N  rows in sending whose lease has expired
  --max-clock-offset D        the host clock of every drain, reconcile and webhook
                              serve that measured it in the last 10 minutes is
                              within D of the store's (PostgreSQL: the database
                              server's; SQLite: always 0)
  --max-daily-recipients-share S
                              every identity with daily_recipients has used at
                              most the share S (0 to 1, e.g. 0.9) of its daily
                              unique-recipient limit in the last 24 hours; past
                              the limit, rows to new recipients wait

The vital signs (see msgq stats), counts measured over --window (default 1h)
where they say so:

  --max-key-conflicts N          key conflicts within the window: a key reused
                                 with another body (something sends wrong data)
  --max-sending-long N           rows in sending claimed over 1m ago, lease
                                 expired or not: each a possible duplicate
  --max-failed-permanent N       rows failed within the window, by reason; also
  --max-failed-expired N         -exhausted, -canceled and -resolved
  --max-resends N                resends made by operators within the window
  --max-maybe-sent N             rows flagged maybe_sent that have no delivered
                                 or read status
  --max-sent-without-progress N  per identity whose webhooks msgq receives: rows
                                 sent within the window, at least
                                 --no-progress-after (default 15m) ago, that got
                                 no delivered, read or failed status since (the
                                 provider accepts, nothing arrives)
  --max-unsendable N             queued rows of identities that cannot send from
                                 here: not configured, or token not set in this
                                 environment (check where the drains run)

Verification challenges (docs/challenges.md):

  --max-challenges-blocked N     open challenges whose fallback is held back by
                                 a step in sending or unknown (each waits for
                                 evidence, reconcile or an operator)
  --max-challenges-expired N     challenges whose deadline passed within the
                                 window with no step completed
  --max-challenge-unknown-past-deadline N
                                 challenge steps in unknown past their deadline:
                                 each a prompt that may or may not have arrived,
                                 in stuck (past deadline) until resolved
  --max-challenge-first-delivery-p95 D
                                 of the challenges whose first delivered
                                 evidence came within the window, 95% waited at
                                 most D from creation to it (no such challenge:
                                 0, healthy)

Config file:

  health:
    max_oldest_queued: 5m
    max_stuck: 0

` + exitStatusHelp,
		Example: `  msgq health --max-oldest-queued 5m --max-stuck 0
  */5 * * * *  msgq health --max-oldest-queued 10m --max-stuck 0 || alert "msgq: health"`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := health.Parse(a.cfg.Health)
			if err != nil {
				return err
			}
			if _, _, err := health.Windows(a.cfg.Health); err != nil {
				return err
			}
			return runHealth(cmd.Context(), a, ts)
		},
	}
	f := cmd.Flags()
	// Strings, resolved with env and config in config.go and parsed by
	// thresholds, so that all three sources are read the same way.
	f.String("max-oldest-queued", "", "the oldest eligible queued row may have been due at most `D` (e.g. 5m) [MSGQ_HEALTH_MAX_OLDEST_QUEUED]")
	f.String("max-stuck", "", "at most `N` rows in sending past their lease plus unknown [MSGQ_HEALTH_MAX_STUCK]")
	f.String("max-unknown", "", "at most `N` rows in unknown [MSGQ_HEALTH_MAX_UNKNOWN]")
	f.String("max-sending-past-lease", "", "at most `N` rows in sending whose lease has expired [MSGQ_HEALTH_MAX_SENDING_PAST_LEASE]")
	for _, t := range health.Vitals {
		unit := "at most `N` "
		if t.IsAge {
			unit = "at most `D` (e.g. 2m): "
		}
		f.String(strings.ReplaceAll(t.Name, "_", "-"), "", unit+t.Help+" [MSGQ_HEALTH_"+strings.ToUpper(t.Name)+"]")
	}
	f.String("window", "", "the span `D` of the recent figures (default 1h; e.g. 30m, 1d) [MSGQ_HEALTH_WINDOW]")
	f.String("no-progress-after", "", "how long `D` a sent row may wait for a status (default 15m) [MSGQ_HEALTH_NO_PROGRESS_AFTER]")
	f.String("max-clock-offset", "", "every recently measured host clock within `D` (e.g. 2s) of the store's [MSGQ_HEALTH_MAX_CLOCK_OFFSET]")
	f.String("max-daily-recipients-share", "", "every identity with daily_recipients has used at most the share `S` (e.g. 0.9) of it in the last 24h [MSGQ_HEALTH_MAX_DAILY_RECIPIENTS_SHARE]")
	return cmd
}

func runHealth(ctx context.Context, a *app, ts []health.Threshold) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	// Only the vital signs' thresholds read recent figures; without one,
	// the smallest window keeps those queries from costing anything.
	p := &store.StatsParams{Window: store.Resolution}
	for _, t := range ts {
		if t.IsVital() {
			p.Window, p.NoProgressAfter, _ = health.Windows(a.cfg.Health)
			p.ProgressIdentities = progressIdentities(a.cfg.Identities)
		}
	}
	s, err := st.Stats(ctx, p)
	if err != nil {
		return err
	}
	res, err := health.Evaluate(ts, health.Input{
		Stats:      s,
		Unsendable: unsendable(a.cfg.Identities, s.Counts),
		DailyShare: func(max int64) (int64, string, error) {
			return dailyShareCheck(ctx, st, a.cfg.Identities, max)
		},
	})
	if err != nil {
		return err
	}
	if a.cfg.Output == outJSON {
		err = printJSON(a.ios.Out, res)
	} else {
		err = printHealth(a.ios.Out, ts, &res)
	}
	if err != nil {
		return err
	}
	crossed := 0
	for _, c := range res.Checks {
		if c.Crossed {
			crossed++
			fmt.Fprintf(a.ios.Err, "health: %s\n", c.Message)
		}
	}
	if crossed > 0 {
		return &exitError{ExitFound, fmt.Sprintf("%d of %d health thresholds crossed", crossed, len(res.Checks))}
	}
	return nil
}

func printHealth(w io.Writer, ts []health.Threshold, r *health.Result) error {
	table := make([][]string, 0, len(r.Checks))
	for i, c := range r.Checks {
		value, limit := strconv.FormatInt(c.Value, 10), strconv.FormatInt(c.Max, 10)
		switch {
		case ts[i].IsAge:
			value, limit = duration.Human(time.Duration(c.Value)), duration.Human(time.Duration(c.Max))
		case ts[i].IsShare:
			value, limit = health.Permille(c.Value), health.Permille(c.Max)
		}
		status := "ok"
		if c.Crossed {
			status = "CROSSED"
		}
		table = append(table, []string{"--" + ts[i].Flag, value, limit, status})
	}
	return printTable(w, []string{"CHECK", "VALUE", "MAX", "STATUS"}, table)
}
