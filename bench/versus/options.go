// Package versus measures msgq and River side by side: the same workloads,
// on the same PostgreSQL database and the same file system, alternating
// between the two so that a change in the machine's load falls on both.
package versus

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Options is one comparison.
type Options struct {
	// N is how many rows the bulk insert writes, and so how many the
	// drain (msgq) and the workers (River) then work.
	N int
	// One is how many rows the one-at-a-time insert writes (each its own
	// transaction, so it is kept smaller than N).
	One int
	// Aged is how many finished rows the aged workload's queues hold
	// before its N new rows are worked.
	Aged int
	// Batch is how many rows one bulk insert call takes, on both sides.
	Batch int
	// Runs is how many times each side runs each workload.
	Runs int
	// Concurrency is River's MaxWorkers and msgq's drain concurrency.
	Concurrency int
	// PostgresURL is the database both sides use, each in a fresh schema
	// per run; "" leaves PostgreSQL out.
	PostgresURL string
	// Dir is where the SQLite files go (one new file per run and side);
	// "" means a new directory under the system's temporary directory.
	Dir string
	// Stores is which stores to measure: postgres, sqlite or both.
	Stores []string
	// Workloads is which workloads to run: bulk, work (which works the
	// bulk insert's rows, so it needs bulk), one, aged and endpoint.
	Workloads []string
	// ProfileDir, when set, receives a CPU profile of every timed drain
	// and every timed River work phase.
	ProfileDir string
}

// Validate reports every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if o.N < 1 {
		errs = append(errs, fmt.Errorf("-n must be at least 1 (got %d)", o.N))
	}
	if o.One < 0 {
		errs = append(errs, fmt.Errorf("-one must be 0 (skip) or more (got %d)", o.One))
	}
	if o.Aged < 1 && o.runs("aged") {
		errs = append(errs, fmt.Errorf("-aged must be at least 1 when the aged workload runs (got %d)", o.Aged))
	}
	if o.Batch < 1 {
		errs = append(errs, fmt.Errorf("-batch must be at least 1 (got %d)", o.Batch))
	}
	if o.Runs < 1 {
		errs = append(errs, fmt.Errorf("-runs must be at least 1 (got %d)", o.Runs))
	}
	if o.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("-concurrency must be at least 1 (got %d)", o.Concurrency))
	}
	if len(o.Stores) == 0 {
		errs = append(errs, errors.New("-stores names no store"))
	}
	for _, s := range o.Stores {
		switch s {
		case storePostgres:
			if o.PostgresURL == "" {
				errs = append(errs, errors.New("-stores has postgres but no -postgres URL (or MSGQ_BENCH_POSTGRES_URL) is set"))
			}
		case storeSQLite:
		default:
			errs = append(errs, fmt.Errorf("-stores: unknown store %q (postgres or sqlite)", s))
		}
	}
	for _, w := range o.Workloads {
		switch w {
		case "bulk", "one", "aged", "endpoint":
		case "work":
			if !o.runs("bulk") {
				errs = append(errs, errors.New("-workloads: work needs bulk (it works the rows the bulk insert wrote)"))
			}
		default:
			errs = append(errs, fmt.Errorf("-workloads: unknown workload %q (bulk, work, one, aged or endpoint)", w))
		}
	}
	if len(o.Workloads) == 0 {
		errs = append(errs, errors.New("-workloads names no workload"))
	}
	return errors.Join(errs...)
}

// runs says whether workload w is to be run.
func (o *Options) runs(w string) bool {
	for _, x := range o.Workloads {
		if x == w {
			return true
		}
	}
	return false
}

const (
	storePostgres = "postgres"
	storeSQLite   = "sqlite"
)

const usage = `Usage: versus [flags]

Measures msgq and River side by side on one PostgreSQL database and one file
system, alternating between them, and prints one table:
workload | River | msgq | ratio (msgq/River), each cell the median over the
runs with the range (min-max) beside it.

Workloads, per store:
  bulk insert      N unique rows in batches of -batch (River InsertMany,
                   unique by args; msgq MessageEnqueueMany, keyed)
  one at a time    -one unique rows, one call (one transaction) each
  work / drain     the N rows of the bulk insert: River's client with a no-op
                   worker; msgq's drain against its in-process simulator with
                   zero latency (a durable claim before each call, an attempt
                   row and history rows after it)
  aged             work / drain of N new rows in a queue that already holds
                   -aged finished rows: River's completed jobs, msgq's
                   messages with their history and attempts, created over
                   90 days (filled with SQL, untimed, per run and side)
  endpoint         msgq only: the drain of N rows with one event endpoint
                   registered for their tenant against the same drain
                   without (no dispatcher runs: only the outbox rows are
                   written); the ratio is with/without

-workloads picks some of them: bulk, work (needs bulk), one, aged and endpoint.

Examples:
  versus -postgres postgres://postgres@127.0.0.1:5432/test?sslmode=disable
  versus -workloads one -one 2000 -stores postgres
  versus -n 2000 -one 200 -runs 1 -stores sqlite
  versus -workloads aged,endpoint -aged 20000 -n 2000 -runs 1
  versus -concurrency 256 -profile /tmp/versus-prof

Flags:
`

// Main runs the comparison with args and returns the process's exit code:
// 0 done, 1 a run failed, 2 bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "versus: %v\nTry: versus -h\n", err)
		return 2
	}
	if err := run(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "versus: %v\n", err)
		return 1
	}
	return 0
}

func parse(args []string, stderr io.Writer) (*Options, error) {
	fs := flag.NewFlagSet("versus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	o := &Options{}
	var stores, workloads string
	fs.IntVar(&o.N, "n", 20_000, "rows per bulk insert, and so per drain / work phase")
	fs.IntVar(&o.One, "one", 1_000, "rows per one-at-a-time insert (0 skips that workload)")
	fs.IntVar(&o.Batch, "batch", 4096, "rows per bulk insert call, both sides")
	fs.IntVar(&o.Aged, "aged", 1_000_000, "finished rows beside the aged workload's N new ones, per queue")
	fs.IntVar(&o.Runs, "runs", 5, "runs per side and workload")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "River's MaxWorkers and msgq's drain concurrency")
	fs.StringVar(&o.PostgresURL, "postgres", os.Getenv("MSGQ_BENCH_POSTGRES_URL"), "PostgreSQL URL both sides use (default $MSGQ_BENCH_POSTGRES_URL)")
	fs.StringVar(&o.Dir, "dir", "", "directory for the SQLite files (default: a new one under $TMPDIR)")
	fs.StringVar(&stores, "stores", "postgres,sqlite", "stores to measure, comma-separated")
	fs.StringVar(&workloads, "workloads", "bulk,work,one,aged,endpoint", "workloads to run, comma-separated: bulk, work (needs bulk), one, aged, endpoint")
	fs.StringVar(&o.ProfileDir, "profile", "", "directory for CPU profiles of each timed drain and River work phase")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(stores, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Stores = append(o.Stores, s)
		}
	}
	for _, w := range strings.Split(workloads, ",") {
		if w = strings.TrimSpace(w); w != "" {
			o.Workloads = append(o.Workloads, w)
		}
	}
	return o, o.Validate()
}
