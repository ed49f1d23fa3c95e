// Package clockwatch measures a process's host clock against the store's
// and keeps the store's clock as the process best knows it: every decision
// several hosts share is made by the store on its own clock; what one
// process still times itself (a pacing slot's wait, a retry's backoff, a
// lease's remaining time) it reads from Watch.Now.
package clockwatch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/store"
)

// Every is how often Start measures.
const Every = time.Minute

// Clocks is what a Watch needs of a store: its clock, and where the
// offsets are recorded (for stats and health).
type Clocks interface {
	ClockNow(ctx context.Context) (time.Time, error)
	ClockOffsetRecord(ctx context.Context, o *store.ClockOffset) error
}

// Config is a Watch's setting.
type Config struct {
	Store Clocks
	// Host is this host's clock (time.Now, or a test's).
	Host func() time.Time
	// WarnAt is the offset past which Measure warns, once, on Stderr.
	WarnAt time.Duration
	// Role is what the process is (drain, reconcile, webhook serve);
	// Process names it in the store (empty: role@host:pid).
	Role, Process string
	Stderr        io.Writer
	Log           *slog.Logger
	// Every is how often Start measures (zero: the package's Every).
	Every time.Duration
	// NoRecord measures and warns but writes nothing (reconcile
	// --dry-run).
	NoRecord bool
}

// New returns a Watch that has not measured yet: Now is the host's clock
// until the first Measure.
func New(c Config) *Watch {
	host, _ := os.Hostname()
	if c.Process == "" {
		c.Process = fmt.Sprintf("%s@%s:%d", c.Role, host, os.Getpid())
	}
	if c.Every <= 0 {
		c.Every = Every
	}
	return &Watch{st: c.Store, host: c.Host, warnAt: c.WarnAt, process: c.Process, role: c.Role, hostname: host,
		stderr: c.Stderr, log: c.Log, measureEv: c.Every, noRecord: c.NoRecord}
}

// Watch measures this host's clock against the store's and keeps the
// store's clock as this process best knows it. Every decision that several
// hosts share is made by the store on its own clock (PostgreSQL: the
// server's, in the statement); what a process still times itself (a
// pacing slot's wait, a retry's backoff, a lease's remaining time) it
// reads from Now, which is its host's clock corrected by the measured
// offset. The offset is recorded in the store, for stats and health, and
// a large one is reported once on stderr: the host's time sync is broken,
// and whatever else runs on that host is wrong too.
type Watch struct {
	st        Clocks
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

// Now is the store's clock as this process knows it: the host's clock
// minus the last measured offset.
func (w *Watch) Now() time.Time {
	w.mu.Lock()
	off := w.offset
	w.mu.Unlock()
	return w.host().Add(-off)
}

// Measure reads the store's clock once, taking the host's at the
// midpoint of the round trip, records the offset and warns (once per
// process) past the threshold.
func (w *Watch) Measure(ctx context.Context) error {
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
			"msgq decides on the server's clock, but fix this host's time sync\n", duration.Human(off.Abs()), side, off.Seconds(), w.warnAt)
	}
	if w.noRecord {
		return nil
	}
	return w.st.ClockOffsetRecord(ctx, &store.ClockOffset{Process: w.process, Host: w.hostname, Role: w.role, Offset: off, RTT: rtt})
}

// Start measures once and then every minute until ctx ends. A failed
// measurement is logged and leaves the last offset in use (none yet: the
// host's clock as it is): the store makes every shared decision on its own
// clock anyway, and a process must not stop for want of a reading that
// only corrects its own waits and reports the offset.
func (w *Watch) Start(ctx context.Context) {
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

func (w *Watch) measureOrLog(ctx context.Context) {
	if err := w.Measure(ctx); err != nil && ctx.Err() == nil {
		w.log.Warn("could not measure this host's clock offset from the store's; trying again in a minute", "err", err)
	}
}
