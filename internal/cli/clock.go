package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/clockwatch"
	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/store"
)

// testClockOffsetEnv shifts the clock this process reads by a duration
// ("600s", "-10m"), so that tests can run one process as if on a host
// whose clock is wrong (Go binaries ignore faketime). Read here alone;
// not for production use, so not in the help.
const testClockOffsetEnv = "MSGQ_TEST_CLOCK_OFFSET"

// hostClock is the clock of the host this process runs on: time.Now,
// shifted by $MSGQ_TEST_CLOCK_OFFSET when set. The shift keeps the
// monotonic reading, so durations measured on it stay true.
func hostClock(getenv func(string) string) (func() time.Time, error) {
	v := getenv(testClockOffsetEnv)
	if v == "" {
		return time.Now, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, usagef("%s %q is not a duration like 600s or -10m", testClockOffsetEnv, v)
	}
	return func() time.Time { return time.Now().Add(d) }, nil
}

// Clock offset measurement: the default warning threshold and its flag.
const (
	defaultClockWarn   = 2 * time.Second
	clockWarnFlag      = "clock-warn"
	clockWarnFlagUsage = "warn on stderr when this host's clock is further than this from the store's (the database server's) [MSGQ_CLOCK_WARN]"
)

// addClockWarnFlag adds --clock-warn to a long-running command.
func addClockWarnFlag(cmd *cobra.Command) {
	cmd.Flags().String(clockWarnFlag, defaultClockWarn.String(), clockWarnFlagUsage)
}

// clockWarn parses the clock_warn setting.
func (c *config) clockWarn() (time.Duration, error) {
	d, err := duration.Parse(c.ClockWarn)
	if err != nil || d <= 0 {
		return 0, usagef("--%s (clock_warn) %q: want a positive duration like 2s", clockWarnFlag, c.ClockWarn)
	}
	return d, nil
}

// newClockWatch is the clock watch of a long-running command of this
// process (role: drain, reconcile, webhook serve); process names it in the
// store's clock offsets (empty: role@host:pid); noRecord measures and
// warns without writing (reconcile --dry-run).
func newClockWatch(a *app, st store.Store, role, process string, warnAt time.Duration, noRecord bool) *clockwatch.Watch {
	return clockwatch.New(clockwatch.Config{Store: st, Host: a.now, WarnAt: warnAt, Role: role, Process: process,
		Stderr: a.ios.Err, Log: a.log, NoRecord: noRecord})
}
