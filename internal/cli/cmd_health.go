package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

// healthSettings are health's thresholds as the user wrote them (flag, env
// or the config file's health: section, resolved in config.go); "" is not
// set.
type healthSettings struct {
	MaxOldestQueued     string
	MaxStuck            string
	MaxUnknown          string
	MaxSendingPastLease string
	// Vitals are the thresholds on the vital signs, by config key
	// (stats_vitals.go: vitalThresholds); Window and NoProgressAfter the
	// spans they are measured over.
	Vitals                  map[string]string
	Window, NoProgressAfter string
	MaxClockOffset          string
	// MaxDailyShare is the share of an identity's daily unique-recipient
	// limit that may be used (health_daily.go).
	MaxDailyShare string
}

// threshold is one parsed limit: a count, or an age in nanoseconds.
type threshold struct {
	name  string // the config key, also the check's name in JSON
	flag  string
	isAge bool
	// isShare: max (and the value) are a share of a limit in thousandths.
	isShare bool
	max     int64
}

// thresholds parses the settings; at least one must be given.
func (h healthSettings) thresholds() ([]threshold, error) {
	var out []threshold
	all := []struct {
		name, flag, v string
		isAge         bool
	}{
		{"max_oldest_queued", "max-oldest-queued", h.MaxOldestQueued, true},
		{"max_stuck", "max-stuck", h.MaxStuck, false},
		{"max_unknown", "max-unknown", h.MaxUnknown, false},
		{"max_sending_past_lease", "max-sending-past-lease", h.MaxSendingPastLease, false},
		{"max_clock_offset", "max-clock-offset", h.MaxClockOffset, true},
	}
	for _, t := range vitalThresholds {
		all = append(all, struct {
			name, flag, v string
			isAge         bool
		}{t.name, strings.ReplaceAll(t.name, "_", "-"), h.Vitals[t.name], t.isAge})
	}
	for _, s := range all {
		if s.v == "" {
			continue
		}
		t := threshold{name: s.name, flag: s.flag, isAge: s.isAge}
		if s.isAge {
			d, err := parseAge(s.v)
			if err != nil {
				return nil, usagef("--%s (health.%s) %q: %v", s.flag, s.name, s.v, err)
			}
			t.max = int64(d)
		} else {
			n, err := strconv.ParseInt(s.v, 10, 64)
			if err != nil || n < 0 {
				return nil, usagef("--%s (health.%s) %q: want a count of 0 or more", s.flag, s.name, s.v)
			}
			t.max = n
		}
		out = append(out, t)
	}
	if h.MaxDailyShare != "" {
		t, err := dailyShareThreshold(h.MaxDailyShare)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, usagef("no thresholds: give at least one of --max-oldest-queued, --max-stuck, --max-unknown, " +
			"--max-sending-past-lease, --max-clock-offset or another --max-* flag of msgq health --help (or set them in the config file's health: section)")
	}
	return out, nil
}

// healthCheck is one threshold checked. Field names are a JSON contract.
type healthCheck struct {
	Name    string `json:"name"`    // the threshold, as in the config file (max_stuck)
	Value   int64  `json:"value"`   // a count, or an age in nanoseconds
	Max     int64  `json:"max"`     // the same unit
	Crossed bool   `json:"crossed"` // value > max
	Message string `json:"message"` // for people; empty when not crossed
}

// healthResult is what `health -o json` prints.
type healthResult struct {
	OK     bool          `json:"ok"`
	At     time.Time     `json:"at"`
	Checks []healthCheck `json:"checks"`
}

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
			ts, err := a.cfg.Health.thresholds()
			if err != nil {
				return err
			}
			if _, _, err := vitalWindows(a.cfg.Health); err != nil {
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
	for _, t := range vitalThresholds {
		unit := "at most `N` "
		if t.isAge {
			unit = "at most `D` (e.g. 2m): "
		}
		f.String(strings.ReplaceAll(t.name, "_", "-"), "", unit+t.help+" [MSGQ_HEALTH_"+strings.ToUpper(t.name)+"]")
	}
	f.String("window", "", "the span `D` of the recent figures (default 1h; e.g. 30m, 1d) [MSGQ_HEALTH_WINDOW]")
	f.String("no-progress-after", "", "how long `D` a sent row may wait for a status (default 15m) [MSGQ_HEALTH_NO_PROGRESS_AFTER]")
	f.String("max-clock-offset", "", "every recently measured host clock within `D` (e.g. 2s) of the store's [MSGQ_HEALTH_MAX_CLOCK_OFFSET]")
	f.String("max-daily-recipients-share", "", "every identity with daily_recipients has used at most the share `S` (e.g. 0.9) of it in the last 24h [MSGQ_HEALTH_MAX_DAILY_RECIPIENTS_SHARE]")
	return cmd
}

func runHealth(ctx context.Context, a *app, ts []threshold) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	// Only the vital signs' thresholds read recent figures; without one,
	// the smallest window keeps those queries from costing anything.
	p := &store.StatsParams{Window: store.Resolution}
	for _, t := range ts {
		if _, ok := a.cfg.Health.Vitals[t.name]; ok {
			p.Window, p.NoProgressAfter, _ = vitalWindows(a.cfg.Health)
			p.ProgressIdentities = progressIdentities(a.cfg.Identities)
		}
	}
	s, err := st.Stats(ctx, p)
	if err != nil {
		return err
	}
	un := unsendable(a.cfg.Identities, s.Counts)
	res := healthResult{OK: true, At: s.At, Checks: []healthCheck{}}
	for _, t := range ts {
		c := healthCheck{Name: t.name, Max: t.max}
		switch t.name {
		case "max_oldest_queued":
			age := oldestAge(s)
			c.Value = int64(age)
			c.Message = fmt.Sprintf("oldest eligible queued row is %s old (max %s)", human(age), human(time.Duration(t.max)))
		case "max_stuck":
			c.Value = int64(s.SendingPastLease + s.Unknown)
			c.Message = fmt.Sprintf("%s stuck: %d in sending past the lease, %d unknown (max %d)",
				nRows(c.Value), s.SendingPastLease, s.Unknown, t.max)
		case "max_unknown":
			c.Value = int64(s.Unknown)
			c.Message = fmt.Sprintf("%s in unknown (max %d)", nRows(c.Value), t.max)
		case "max_sending_past_lease":
			c.Value = int64(s.SendingPastLease)
			c.Message = fmt.Sprintf("%s in sending past the lease (max %d)", nRows(c.Value), t.max)
		case dailyShareName:
			c.Value, c.Message, err = dailyShareCheck(ctx, st, a.cfg.Identities, t.max)
			if err != nil {
				return err
			}
		case "max_clock_offset":
			c.Value = int64(abs(s.ClockOffset))
			c.Message = fmt.Sprintf("clock of %s is %+.3fs off the store's clock (max %s)", s.ClockOffsetProcess,
				s.ClockOffset.Seconds(), human(time.Duration(t.max)))
		default:
			c.Value, c.Message, _ = vitalCheck(t.name, t.max, s, un)
		}
		c.Crossed = c.Value > c.Max
		if !c.Crossed {
			c.Message = ""
		}
		res.OK = res.OK && !c.Crossed
		res.Checks = append(res.Checks, c)
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

// nRows is "1 row" or "N rows".
func nRows(n int64) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.FormatInt(n, 10) + " rows"
}

func printHealth(w io.Writer, ts []threshold, r *healthResult) error {
	table := make([][]string, 0, len(r.Checks))
	for i, c := range r.Checks {
		value, limit := strconv.FormatInt(c.Value, 10), strconv.FormatInt(c.Max, 10)
		switch {
		case ts[i].isAge:
			value, limit = human(time.Duration(c.Value)), human(time.Duration(c.Max))
		case ts[i].isShare:
			value, limit = permille(c.Value), permille(c.Max)
		}
		status := "ok"
		if c.Crossed {
			status = "CROSSED"
		}
		table = append(table, []string{"--" + ts[i].flag, value, limit, status})
	}
	return printTable(w, []string{"CHECK", "VALUE", "MAX", "STATUS"}, table)
}
