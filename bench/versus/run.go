package versus

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// side is one queue implementation under test.
type side interface {
	name() string
	// open makes a fresh, migrated queue on store st, empty but for what
	// f asks; seq makes its schema or file name unique.
	open(ctx context.Context, st string, seq int, f fill) (queue, error)
	// template fills, untimed, the side's queue of n finished rows on
	// store st that open copies for each run of the aged workload, and
	// returns what removes it.
	template(ctx context.Context, st string, n int) (remove func() error, err error)
}

// fill is what a queue holds, or has, before a workload starts; filling
// is never timed.
type fill struct {
	// aged is how many finished rows the queue already holds: msgq's
	// messages with their history and attempts (internal/store/aged),
	// River's completed jobs. The queue is a copy of the side's template.
	aged int
	// endpoint registers an event endpoint for the rows' tenant (msgq
	// only): every outcome then also writes an event into the outbox.
	endpoint bool
}

// queue is one fresh queue of a side.
type queue interface {
	// insertMany writes rs in batches of Options.Batch and returns how
	// many were duplicates of rows already there.
	insertMany(ctx context.Context, rs []row) (replayed int, err error)
	// insertOne writes one row in its own call and transaction.
	insertOne(ctx context.Context, r row) (replayed bool, err error)
	// work processes the n rows in the queue and returns how long it
	// took until the last one's outcome was written.
	work(ctx context.Context, n int) (time.Duration, error)
	// close releases the queue and drops its schema or file.
	close() error
	// writes returns, after close, what the queue's PostgreSQL tables
	// took (nil for SQLite).
	writes() tally
	// app is the application_name of the queue's PostgreSQL connections
	// ("" for SQLite).
	app() string
}

// appName is the application_name of queue seq of a side.
func appName(side string, seq int) string {
	return fmt.Sprintf("versus_%s_%d", strings.ToLower(side), seq)
}

// workload names one row of the table.
type workload struct {
	store string
	kind  string // bulk, one, work, aged, endpoint
}

// The sides of the endpoint workload, both msgq.
const (
	withEndpoint    = "with"
	withoutEndpoint = "without"
)

// results holds every run's rate per workload and side.
type results struct {
	rates map[workload]map[string][]float64
	// tallies is run 1's PostgreSQL writes per side.
	tallies map[string]tally
	// cpu is each run's CPU per message, in µs.
	cpu map[workload]map[string]*cpuRuns
}

type cpuRuns struct{ client, server []float64 }

func newResults() *results {
	return &results{rates: map[workload]map[string][]float64{}, tallies: map[string]tally{}, cpu: map[workload]map[string]*cpuRuns{}}
}

func (r *results) add(w workload, side string, rate float64) {
	if r.rates[w] == nil {
		r.rates[w] = map[string][]float64{}
	}
	r.rates[w][side] = append(r.rates[w][side], rate)
}

func (r *results) addCPU(w workload, side string, n int, client, server time.Duration) {
	if r.cpu[w] == nil {
		r.cpu[w] = map[string]*cpuRuns{}
	}
	c := r.cpu[w][side]
	if c == nil {
		c = &cpuRuns{}
		r.cpu[w][side] = c
	}
	c.client = append(c.client, float64(client.Microseconds())/float64(n))
	c.server = append(c.server, float64(server.Microseconds())/float64(n))
}

func run(ctx context.Context, o *Options, stdout, stderr io.Writer) error {
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "msgq-versus-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	env := environment(ctx, o)
	fmt.Fprintf(stderr, "versus: load average %s\n", env.loadBefore)
	sides := []side{riverSide{o: o, aged: map[string]string{}}, msgqSide{o: o, aged: map[string]string{}}}
	if o.runs("aged") {
		// Filling a million rows takes minutes: each side's is filled once
		// per store and copied for every run, so each run starts from the
		// same rows.
		for _, st := range o.Stores {
			for _, sd := range sides {
				start := time.Now()
				remove, err := sd.template(ctx, st, o.Aged)
				if err != nil {
					return fmt.Errorf("%s on %s: aged template: %w", sd.name(), st, err)
				}
				defer func() {
					if err := remove(); err != nil {
						fmt.Fprintf(stderr, "versus: removing %s's aged template on %s: %v\n", sd.name(), st, err)
					}
				}()
				fmt.Fprintf(stderr, "%-6s %-8s aged template of %d finished rows filled (untimed) in %s, %s\n",
					st, sd.name(), o.Aged, time.Since(start).Round(time.Millisecond), templateSize(ctx, o, st, sd))
			}
		}
	}
	res := newResults()
	seq := 0
	for r := 1; r <= o.Runs; r++ {
		// Alternate which side goes first, so that a drift in the
		// machine's load does not fall on one side only.
		order := sides
		if r%2 == 0 {
			order = []side{sides[1], sides[0]}
		}
		for _, st := range o.Stores {
			for _, sd := range order {
				seq++
				if err := measure(ctx, o, sd, st, r, seq, res, stderr); err != nil {
					return fmt.Errorf("%s on %s, run %d: %w", sd.name(), st, r, err)
				}
			}
		}
	}
	env.loadAfter = loadAverage()
	fmt.Fprintf(stderr, "versus: load average %s\n", env.loadAfter)
	env.write(stdout, o)
	writeTable(stdout, o, res)
	writeCPU(stdout, o, res)
	writeTallies(stdout, o, res.tallies)
	return nil
}

// measure runs every workload of o.Workloads once for one side on one
// store.
func measure(ctx context.Context, o *Options, sd side, st string, r, seq int, res *results, stderr io.Writer) error {
	if o.runs("bulk") {
		if err := measureBulk(ctx, o, sd, st, r, seq, res, stderr); err != nil {
			return err
		}
	}
	if o.runs("one") && o.One > 0 {
		if err := measureOne(ctx, o, sd, st, r, seq, res, stderr); err != nil {
			return err
		}
	}
	if o.runs("aged") {
		err := measureDrain(ctx, o, sd, st, r, seq+2<<20, fill{aged: o.Aged}, workload{st, "aged"}, sd.name(), rows(r+2<<16, o.N), res, stderr)
		if err != nil {
			return fmt.Errorf("beside %d finished rows: %w", o.Aged, err)
		}
	}
	if o.runs("endpoint") && sd.name() == "msgq" {
		// With and without in turn, the first alternating as the sides do.
		order := []bool{false, true}
		if r%2 == 0 {
			order = []bool{true, false}
		}
		for i, ep := range order {
			label := map[bool]string{true: withEndpoint, false: withoutEndpoint}[ep]
			err := measureDrain(ctx, o, sd, st, r, seq+(3+i)<<20, fill{endpoint: ep}, workload{st, "endpoint"}, label, rows(r+3<<16, o.N), res, stderr)
			if err != nil {
				return fmt.Errorf("drain %s an endpoint: %w", label, err)
			}
		}
	}
	return nil
}

// measureDrain works rs, written untimed into a fresh queue filled as f
// says, and adds the rate to wl's column label.
func measureDrain(ctx context.Context, o *Options, sd side, st string, r, seq int, f fill, wl workload, label string, rs []row, res *results, stderr io.Writer) error {
	start := time.Now()
	q, err := sd.open(ctx, st, seq, f)
	if err != nil {
		return err
	}
	err = func() error {
		replayed, err := q.insertMany(ctx, rs)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if replayed != 0 {
			return fmt.Errorf("insert: %d of %d new rows taken for duplicates", replayed, len(rs))
		}
		fmt.Fprintf(stderr, "run %d %-6s %-8s %-8s set up (untimed) in %s\n", r, st, label, wl.kind, time.Since(start).Round(time.Millisecond))
		stopProfile, err := profile(o, fmt.Sprintf("%s-%s-%s-%d.pprof", strings.ToLower(label), wl.kind, st, r))
		if err != nil {
			return err
		}
		meter := startCPU(o.PostgresURL, q.app())
		d, err := q.work(ctx, len(rs))
		cl, sv := meter.stop()
		stopProfile()
		if err != nil {
			return fmt.Errorf("work: %w", err)
		}
		res.add(wl, label, rate(len(rs), d))
		res.addCPU(wl, label, len(rs), cl, sv)
		fmt.Fprintf(stderr, "run %d %-6s %-8s %-8s %7d msgs in %8s: %8.0f msgs/s\n", r, st, label, wl.kind, len(rs), d.Round(time.Millisecond), rate(len(rs), d))
		return nil
	}()
	if cerr := q.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close: %w", cerr))
	}
	return err
}

// measureBulk runs the bulk insert, and then the work phase over its rows
// when o.Workloads has work, on a fresh queue.
func measureBulk(ctx context.Context, o *Options, sd side, st string, r, seq int, res *results, stderr io.Writer) error {
	rs := rows(r, o.N)
	q, err := sd.open(ctx, st, seq, fill{})
	if err != nil {
		return err
	}
	err = func() error {
		start := time.Now()
		replayed, err := q.insertMany(ctx, rs)
		d := time.Since(start)
		if err != nil {
			return fmt.Errorf("bulk insert: %w", err)
		}
		if replayed != 0 {
			return fmt.Errorf("bulk insert: %d of %d new rows taken for duplicates", replayed, len(rs))
		}
		res.add(workload{st, "bulk"}, sd.name(), rate(len(rs), d))
		fmt.Fprintf(stderr, "run %d %-6s %-8s bulk insert %7d rows in %8s: %8.0f rows/s\n", r, st, sd.name(), len(rs), d.Round(time.Millisecond), rate(len(rs), d))

		// Untimed: a second insert of the same rows must be refused as
		// duplicates, so the comparison is of unique inserts on both sides.
		again := rs[:min(len(rs), 100)]
		if replayed, err := q.insertMany(ctx, again); err != nil || replayed != len(again) {
			return fmt.Errorf("unique check: %d of %d duplicates recognised (err %v)", replayed, len(again), err)
		}

		if !o.runs("work") {
			return nil
		}
		stopProfile, err := profile(o, fmt.Sprintf("%s-work-%s-%d.pprof", strings.ToLower(sd.name()), st, r))
		if err != nil {
			return err
		}
		meter := startCPU(o.PostgresURL, q.app())
		d, err = q.work(ctx, len(rs))
		cl, sv := meter.stop()
		stopProfile()
		if err != nil {
			return fmt.Errorf("work: %w", err)
		}
		res.add(workload{st, "work"}, sd.name(), rate(len(rs), d))
		res.addCPU(workload{st, "work"}, sd.name(), len(rs), cl, sv)
		fmt.Fprintf(stderr, "run %d %-6s %-8s work        %7d msgs in %8s: %8.0f msgs/s\n", r, st, sd.name(), len(rs), d.Round(time.Millisecond), rate(len(rs), d))
		return nil
	}()
	if cerr := q.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close: %w", cerr))
	}
	if t := q.writes(); err == nil && t != nil && r == 1 && o.runs("work") {
		res.tallies[sd.name()] = t
	}
	return err
}

// measureOne inserts o.One rows one call (one transaction) each into a
// fresh queue.
func measureOne(ctx context.Context, o *Options, sd side, st string, r, seq int, res *results, stderr io.Writer) error {
	rs := rows(r+1<<16, o.One)
	q, err := sd.open(ctx, st, seq+1<<20, fill{})
	if err != nil {
		return err
	}
	err = func() error {
		meter := startCPU(o.PostgresURL, q.app())
		start := time.Now()
		for _, x := range rs {
			replayed, err := q.insertOne(ctx, x)
			if err != nil {
				return fmt.Errorf("insert one: %w", err)
			}
			if replayed {
				return errors.New("insert one: a new row taken for a duplicate")
			}
		}
		d := time.Since(start)
		cl, sv := meter.stop()
		res.add(workload{st, "one"}, sd.name(), rate(len(rs), d))
		res.addCPU(workload{st, "one"}, sd.name(), len(rs), cl, sv)
		fmt.Fprintf(stderr, "run %d %-6s %-8s insert one  %7d rows in %8s: %8.0f rows/s\n", r, st, sd.name(), len(rs), d.Round(time.Millisecond), rate(len(rs), d))
		if replayed, err := q.insertOne(ctx, rs[0]); err != nil || !replayed {
			return fmt.Errorf("unique check: a duplicate was not recognised (err %v)", err)
		}
		return nil
	}()
	if cerr := q.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close: %w", cerr))
	}
	return err
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// profile starts a CPU profile into o.ProfileDir/name when profiles are
// asked for, and returns the function that stops it.
func profile(o *Options, name string) (func(), error) {
	if o.ProfileDir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(o.ProfileDir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// env describes where the figures were measured.
type env struct {
	started    time.Time
	machine    string
	riverVer   string
	postgres   string
	sqlite     string
	loadBefore string
	loadAfter  string
}

func environment(ctx context.Context, o *Options) *env {
	e := &env{started: time.Now(), loadBefore: loadAverage(), riverVer: "?", postgres: "-", sqlite: "?"}
	e.machine = fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s memory, %s/%s, %s",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), memTotal(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				e.riverVer = d.Version
			}
		}
	}
	if o.PostgresURL != "" {
		if c, err := pgx.Connect(ctx, o.PostgresURL); err == nil {
			_ = c.QueryRow(ctx, "SHOW server_version").Scan(&e.postgres)
			c.Close(ctx)
		}
	}
	if db, err := sql.Open("sqlite", ":memory:"); err == nil {
		_ = db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&e.sqlite)
		db.Close()
	}
	return e
}

func (e *env) write(w io.Writer, o *Options) {
	fmt.Fprintf(w, "msgq (this checkout) against River %s, %s, %s\n", e.riverVer, e.started.UTC().Format("2006-01-02 15:04 MST"), time.Since(e.started).Round(time.Second))
	fmt.Fprintf(w, "machine: %s; PostgreSQL %s; SQLite %s\n", e.machine, e.postgres, e.sqlite)
	fmt.Fprintf(w, "n %d, one-at-a-time %d, batch %d, aged %d, concurrency %d (River MaxWorkers = msgq drain concurrency), %d run(s) per side, alternating\n",
		o.N, o.One, o.Batch, o.Aged, o.Concurrency, o.Runs)
	fmt.Fprintf(w, "load average (1, 5, 15 min): %s before, %s after\n\n", e.loadBefore, e.loadAfter)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	var kb int
	for _, l := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(l, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}
