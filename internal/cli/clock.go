package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

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

// Clock offset measurement: how often, and the default warning threshold.
const (
	clockMeasureEvery  = time.Minute
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

// clockWatch measures this host's clock against the store's and keeps the
// store's clock as this process best knows it. Every decision that several
// hosts share is made by the store on its own clock (PostgreSQL: the
// server's, in the statement); what a process still times itself (a
// pacing slot's wait, a retry's backoff, a lease's remaining time) it
// reads from Now, which is its host's clock corrected by the measured
// offset. The offset is recorded in the store, for stats and health, and
// a large one is reported once on stderr: the host's time sync is broken,
// and whatever else runs on that host is wrong too.
type clockWatch struct {
	st        store.Store
	host      func() time.Time
	warnAt    time.Duration
	process   string
	role      string
	hostname  string
	stderr    io.Writer
	log       *slog.Logger
	measureEv time.Duration
	// noRecord measures and warns but writes nothing (reconcile
	// --dry-run).
	noRecord bool

	mu     sync.Mutex
	offset time.Duration // host minus store
	warned bool
}

func newClockWatch(a *app, st store.Store, role, process string, warnAt time.Duration) *clockWatch {
	host, _ := os.Hostname()
	if process == "" {
		process = fmt.Sprintf("%s@%s:%d", role, host, os.Getpid())
	}
	return &clockWatch{st: st, host: a.now, warnAt: warnAt, process: process, role: role, hostname: host,
		stderr: a.ios.Err, log: a.log, measureEv: clockMeasureEvery}
}

// Now is the store's clock as this process knows it: the host's clock
// minus the last measured offset.
func (w *clockWatch) Now() time.Time {
	w.mu.Lock()
	off := w.offset
	w.mu.Unlock()
	return w.host().Add(-off)
}

// measure reads the store's clock once, taking the host's at the
// midpoint of the round trip, records the offset and warns (once per
// process) past the threshold.
func (w *clockWatch) measure(ctx context.Context) error {
	t0 := w.host()
	srv, err := w.st.ClockNow(ctx)
	t1 := w.host()
	if err != nil {
		return err
	}
	rtt := t1.Sub(t0)
	off := t0.Add(rtt / 2).Sub(srv).Round(time.Millisecond)
	w.mu.Lock()
	w.offset = off
	warn := !w.warned && (off > w.warnAt || off < -w.warnAt)
	if warn {
		w.warned = true
	}
	w.mu.Unlock()
	if warn {
		side := "ahead of"
		if off < 0 {
			side = "behind"
		}
		fmt.Fprintf(w.stderr, "msgq: warning: this host's clock is %s %s the store's (database server's) clock (offset %+.3fs, threshold %s); "+
			"msgq decides on the server's clock, but fix this host's time sync\n", duration.Human(abs(off)), side, off.Seconds(), w.warnAt)
	}
	if w.noRecord {
		return nil
	}
	return w.st.ClockOffsetRecord(ctx, &store.ClockOffset{Process: w.process, Host: w.hostname, Role: w.role, Offset: off, RTT: rtt})
}

// start measures once and then every minute until ctx ends. A failed
// measurement is logged and leaves the last offset in use (none yet: the
// host's clock as it is): the store makes every shared decision on its own
// clock anyway, and a process must not stop for want of a reading that
// only corrects its own waits and reports the offset.
func (w *clockWatch) start(ctx context.Context) {
	w.measureOrLog(ctx)
	go func() {
		t := time.NewTicker(w.measureEv)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.measureOrLog(ctx)
			}
		}
	}()
}

func (w *clockWatch) measureOrLog(ctx context.Context) {
	if err := w.measure(ctx); err != nil && ctx.Err() == nil {
		w.log.Warn("could not measure this host's clock offset from the store's; trying again in a minute", "err", err)
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
