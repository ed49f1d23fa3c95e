package versus

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the SQLite msgq uses, for River's database/sql driver too
)

// riverSide opens River queues: a fresh schema or a fresh file per queue,
// migrated by River's own migrator, or a copy of its aged template.
type riverSide struct {
	o *Options
	// aged is the aged template per store: a database name or a file.
	aged map[string]string
}

func (riverSide) name() string { return "River" }

// noopWorker works a message by doing nothing.
type noopWorker struct {
	river.WorkerDefaults[messageArgs]
}

func (noopWorker) Work(context.Context, *river.Job[messageArgs]) error { return nil }

func (r riverSide) open(ctx context.Context, st string, seq int, f fill) (queue, error) {
	switch st {
	case storePostgres:
		return r.openPostgres(ctx, seq, f)
	case storeSQLite:
		return r.openSQLite(ctx, seq, f)
	}
	return nil, fmt.Errorf("unknown store %q", st)
}

func (r riverSide) openPostgres(ctx context.Context, seq int, f fill) (queue, error) {
	url, schema := r.o.PostgresURL, fmt.Sprintf("versus_river_%d_%d", time.Now().UnixNano(), seq)
	var drop func() (tally, error)
	if f.aged > 0 {
		db, err := copyDatabase(ctx, r.o.PostgresURL, r.aged[storePostgres], seq)
		if err != nil {
			return nil, err
		}
		url, schema = withDB(url, db), agedSchema
		drop = func() (tally, error) { return nil, dropDatabase(r.o.PostgresURL, db) }
	} else {
		if err := createSchema(ctx, url, schema); err != nil {
			return nil, err
		}
		drop = func() (tally, error) { return tallyAndDrop(url, schema) }
	}
	app := appName(r.name(), seq)
	pool, err := pgxpool.New(ctx, withApp(url, app))
	if err != nil {
		_, derr := drop()
		return nil, errors.Join(err, derr)
	}
	cleanup := func() (tally, error) { pool.Close(); return drop() }
	q, err := newRiverQueue(ctx, r.o, riverpgxv5.New(pool), schema, app, f, cleanup)
	if err != nil {
		_, cerr := cleanup()
		return nil, errors.Join(err, cerr)
	}
	return q, nil
}

func (r riverSide) openSQLite(ctx context.Context, seq int, f fill) (queue, error) {
	path := filepath.Join(r.o.Dir, fmt.Sprintf("river-%d.db", seq))
	if f.aged > 0 {
		if err := copyFile(r.aged[storeSQLite], path); err != nil {
			return nil, errors.Join(err, removeSQLite(path))
		}
	}
	db, err := openRiverSQLite(ctx, path)
	if err != nil {
		return nil, errors.Join(err, removeSQLite(path))
	}
	cleanup := func() (tally, error) { return nil, errors.Join(db.Close(), removeSQLite(path)) }
	q, err := newRiverQueue(ctx, r.o, riversqlite.New(db), "", "", f, cleanup)
	if err != nil {
		_, cerr := cleanup()
		return nil, errors.Join(err, cerr)
	}
	return q, nil
}

// openRiverSQLite opens River's database at path with the durability
// msgq's store runs with: WAL, synchronous=FULL (an fsync per commit), and
// the single connection River's driver documentation advises for SQLite.
func openRiverSQLite(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var mode string
	var sync int
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		return nil, errors.Join(fmt.Errorf("river sqlite: journal_mode %q, want wal", mode), err, db.Close())
	}
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		return nil, errors.Join(fmt.Errorf("river sqlite: synchronous %d, want 2 (FULL)", sync), err, db.Close())
	}
	return db, nil
}

// template fills, untimed, the queue with n completed jobs whose copies
// the aged workload's runs on store st start from, and returns what
// removes it.
func (r riverSide) template(ctx context.Context, st string, n int) (func() error, error) {
	switch st {
	case storePostgres:
		db, err := createDatabase(ctx, r.o.PostgresURL, "versus_aged_river")
		if err != nil {
			return nil, err
		}
		remove := func() error { return dropDatabase(r.o.PostgresURL, db) }
		url := withDB(r.o.PostgresURL, db)
		err = func() error {
			if err := createSchema(ctx, url, agedSchema); err != nil {
				return err
			}
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				return err
			}
			defer pool.Close()
			q, err := newRiverQueue(ctx, r.o, riverpgxv5.New(pool), agedSchema, "", fill{aged: n}, nil)
			if err != nil {
				return err
			}
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			if err := fillRiverPostgres(ctx, c, agedSchema, n, time.Now()); err != nil {
				return err
			}
			return q.checkAged(ctx, n, func(q string) (n int, err error) {
				return n, c.QueryRow(ctx, strings.ReplaceAll(q, "river_job", pgx.Identifier{agedSchema, "river_job"}.Sanitize())).Scan(&n)
			})
		}()
		if err != nil {
			return nil, errors.Join(err, remove())
		}
		r.aged[st] = db
		return remove, nil
	case storeSQLite:
		path := filepath.Join(r.o.Dir, "river-aged.db")
		remove := func() error { return removeSQLite(path) }
		err := func() error {
			db, err := openRiverSQLite(ctx, path)
			if err != nil {
				return err
			}
			defer db.Close()
			q, err := newRiverQueue(ctx, r.o, riversqlite.New(db), "", "", fill{aged: n}, nil)
			if err != nil {
				return err
			}
			if err := fillRiverSQLite(ctx, db, n, time.Now()); err != nil {
				return err
			}
			return q.checkAged(ctx, n, func(q string) (n int, err error) { return n, db.QueryRowContext(ctx, q).Scan(&n) })
		}()
		if err != nil {
			return nil, errors.Join(err, remove())
		}
		r.aged[st] = path
		return remove, nil
	}
	return nil, fmt.Errorf("unknown store %q", st)
}

// riverQueue is one migrated River schema with a client ready to work it.
type riverQueue[TTx any] struct {
	o       *Options
	client  *river.Client[TTx]
	appName string
	cleanup func() (tally, error)
	tally   tally
}

// checkAged checks, untimed, that the n aged jobs are there, completed,
// and that River takes a new insert of the first's or the last's args for
// a duplicate: their unique keys are River's own. count runs a count(*)
// query on river_job.
func (q *riverQueue[TTx]) checkAged(ctx context.Context, n int, count func(q string) (int, error)) error {
	got, err := count("SELECT count(*) FROM river_job WHERE state = 'completed'")
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("aged fill: %d completed jobs, want %d", got, n)
	}
	for _, g := range []int{1, n} {
		res, err := q.client.Insert(ctx, agedArgs(g), nil)
		if err != nil {
			return err
		}
		if !res.UniqueSkippedAsDuplicate {
			return fmt.Errorf("aged fill: River took a new insert of aged job %d's args for a new job: the filled unique keys are not River's", g)
		}
	}
	return nil
}

func newRiverQueue[TTx any](ctx context.Context, o *Options, driver riverdriver.Driver[TTx], schema, app string, f fill, cleanup func() (tally, error)) (*riverQueue[TTx], error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	var retention time.Duration // River's default, 24 hours
	if f.aged > 0 {
		// Keep the aged jobs, as a River set to keep 100 days of them
		// would: with the default its job cleaner would delete every job
		// finished over 24 hours ago while the new ones are worked. The
		// cleaner still runs, and finds nothing to delete.
		retention = agedRetention
	}
	client, err := river.NewClient(driver, &river.Config{
		CompletedJobRetentionPeriod: retention,
		// River's own benchmark (cmd/river bench) tunes these for
		// throughput: the defaults (100 ms and 1 s) would cap a queue of 64
		// workers at a few hundred jobs per second.
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Concurrency}},
		Schema:            schema,
		Workers:           workers,
	})
	if err != nil {
		return nil, err
	}
	return &riverQueue[TTx]{o: o, client: client, appName: app, cleanup: cleanup}, nil
}

func (q *riverQueue[TTx]) insertMany(ctx context.Context, rs []row) (replayed int, err error) {
	ps := make([]river.InsertManyParams, 0, q.o.Batch)
	for off := 0; off < len(rs); off += q.o.Batch {
		ps = ps[:0]
		for _, r := range rs[off:min(off+q.o.Batch, len(rs))] {
			ps = append(ps, river.InsertManyParams{Args: r.river})
		}
		res, err := q.client.InsertMany(ctx, ps)
		if err != nil {
			return replayed, err
		}
		for _, r := range res {
			if r.UniqueSkippedAsDuplicate {
				replayed++
			}
		}
	}
	return replayed, nil
}

func (q *riverQueue[TTx]) insertOne(ctx context.Context, r row) (bool, error) {
	res, err := q.client.Insert(ctx, r.river, nil)
	if err != nil {
		return false, err
	}
	return res.UniqueSkippedAsDuplicate, nil
}

// work starts the client and times it until n jobs are completed. A
// completion event is sent once the completer has written the job's new
// state (River's own benchmark counts the same events).
func (q *riverQueue[TTx]) work(ctx context.Context, n int) (time.Duration, error) {
	events, cancel := q.client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1024,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancel()
	ctx, stop := context.WithTimeout(ctx, 10*time.Minute)
	defer stop()
	start := time.Now()
	if err := q.client.Start(ctx); err != nil {
		return 0, err
	}
	var err error
	for done := 0; done < n && err == nil; done++ {
		select {
		case ev := <-events:
			switch {
			case ev == nil:
				err = fmt.Errorf("river: subscription closed after %d of %d jobs", done, n)
			case ev.Kind != river.EventKindJobCompleted:
				err = fmt.Errorf("river: job %d: %s", ev.Job.ID, ev.Kind)
			}
		case <-ctx.Done():
			err = fmt.Errorf("river: %d of %d jobs worked: %w", done, n, ctx.Err())
		}
	}
	d := time.Since(start)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	return d, errors.Join(err, q.client.Stop(stopCtx))
}

func (q *riverQueue[TTx]) close() (err error) {
	q.tally, err = q.cleanup()
	return err
}

func (q *riverQueue[TTx]) writes() tally { return q.tally }
func (q *riverQueue[TTx]) app() string   { return q.appName }

func createSchema(ctx context.Context, url, schema string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return err
}

// tallyAndDrop reads what schema's tables took, then drops it; the
// schema's connections must be closed first.
func tallyAndDrop(url, schema string) (tally, error) {
	t, err := schemaTally(url, schema)
	return t, errors.Join(err, dropSchema(url, schema))
}

func dropSchema(url, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

func removeSQLite(path string) error {
	var errs []error
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
