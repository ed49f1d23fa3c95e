package versus

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
// migrated by River's own migrator.
type riverSide struct{ o *Options }

func (riverSide) name() string { return "River" }

// noopWorker works a message by doing nothing.
type noopWorker struct {
	river.WorkerDefaults[messageArgs]
}

func (noopWorker) Work(context.Context, *river.Job[messageArgs]) error { return nil }

func (r riverSide) open(ctx context.Context, st string, seq int) (queue, error) {
	switch st {
	case storePostgres:
		schema := fmt.Sprintf("versus_river_%d_%d", time.Now().UnixNano(), seq)
		if err := createSchema(ctx, r.o.PostgresURL, schema); err != nil {
			return nil, err
		}
		app := appName(r.name(), seq)
		pool, err := pgxpool.New(ctx, withApp(r.o.PostgresURL, app))
		if err != nil {
			return nil, errors.Join(err, dropSchema(r.o.PostgresURL, schema))
		}
		cleanup := func() (tally, error) { pool.Close(); return tallyAndDrop(r.o.PostgresURL, schema) }
		q, err := newRiverQueue(ctx, r.o, riverpgxv5.New(pool), schema, app, cleanup)
		if err != nil {
			_, cerr := cleanup()
			return nil, errors.Join(err, cerr)
		}
		return q, nil
	case storeSQLite:
		path := filepath.Join(r.o.Dir, fmt.Sprintf("river-%d.db", seq))
		// The durability msgq's store runs with: WAL, synchronous=FULL (an
		// fsync per commit), and the single connection River's driver
		// documentation advises for SQLite.
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
		cleanup := func() (tally, error) { return nil, errors.Join(db.Close(), removeSQLite(path)) }
		q, err := newRiverQueue(ctx, r.o, riversqlite.New(db), "", "", cleanup)
		if err != nil {
			_, cerr := cleanup()
			return nil, errors.Join(err, cerr)
		}
		return q, nil
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

func newRiverQueue[TTx any](ctx context.Context, o *Options, driver riverdriver.Driver[TTx], schema, app string, cleanup func() (tally, error)) (*riverQueue[TTx], error) {
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
	client, err := river.NewClient(driver, &river.Config{
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
