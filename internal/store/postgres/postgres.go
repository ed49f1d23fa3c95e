// Package postgres is msgq's shared store: one PostgreSQL database used by
// drains and senders on many hosts at once (docs/drain.md). Every claim and
// outcome is one committed transaction; rows are locked (FOR UPDATE, SKIP
// LOCKED for claims) rather than the whole database.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgq/msgq/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is the PostgreSQL implementation of store.Store.
type Store struct {
	pool *db
	now  func() time.Time
	log  *slog.Logger
	// pooled, when set, says why the store takes a transaction pooler to
	// be in front of the server (pooler.go): nothing lasts between
	// transactions.
	pooled string

	ids *store.IDs
}

var _ store.Store = (*Store)(nil)

// Options tunes Open. The zero value is what msgq uses.
type Options struct {
	// Now replaces the store's clock (tests); nil means the database
	// server's clock, which every decision that several hosts share is
	// made on.
	Now func() time.Time
	// NoMigrate skips the automatic migration on open.
	NoMigrate bool
	// Log receives what the store does on its own (re-listening after a
	// lost connection); nil discards it.
	Log *slog.Logger
	// Schema, when set, is the search_path of every connection (created
	// if missing), so that several queues (or tests) can share a database.
	Schema string
}

// Open connects to the database at url and, unless opts.NoMigrate, brings
// its schema up to date.
//
// The URL's pooler parameter (msgq's own, not sent to the server) says
// whether a transaction pooler stands in front of the server:
// pooler=transaction, pooler=none, or pooler=auto (the default), where
// the pool's first connection finds out (detector). Behind one, the
// store keeps nothing between transactions (pooler.go). A bad value is an
// *store.InvalidError.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	mode, err := takePoolerMode(cfg.ConnConfig.RuntimeParams)
	if err != nil {
		return nil, err
	}
	if opts.Schema != "" {
		if err := createSchema(ctx, safeConfig(cfg.ConnConfig), opts.Schema); err != nil {
			return nil, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	}
	settings, badSettings := settingsOf(cfg.ConnConfig)
	var det *detector
	var pooled string
	switch mode {
	case poolerAuto:
		det = &detector{settings: settings, bad: badSettings}
		cfg.BeforeConnect, cfg.AfterConnect, cfg.PrepareConn = det.beforeConnect, det.afterConnect, det.prepareConn
	case poolerTransaction:
		pooled = "pooler=transaction in the URL"
		trimForPooler(cfg.ConnConfig)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if det != nil {
		// The first connection finds out.
		c, err := pool.Acquire(ctx)
		if errors.Is(err, errReconnect) {
			c, err = pool.Acquire(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: connect: %w", err)
		}
		c.Release()
		pooled = det.pooled
	}
	var local string
	if pooled != "" {
		if badSettings != nil {
			pool.Close()
			return nil, badSettings
		}
		local = setConfigSQL(settings, true)
	}
	s := &Store{pool: &db{Pool: pool, local: local}, now: opts.Now, log: opts.Log, ids: store.NewIDs(), pooled: pooled}
	if local != "" {
		// A setting the server refuses would otherwise fail each
		// statement later, far from the URL that named it.
		if _, err := pool.Exec(ctx, local); err != nil {
			s.Close()
			return nil, fmt.Errorf("postgres: behind a transaction pooler (%s) the URL's settings are applied to each transaction, and the server refused them: %w", pooled, err)
		}
	}
	if !opts.NoMigrate {
		if _, err := s.Migrate(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func createSchema(ctx context.Context, cc *pgx.ConnConfig, schema string) error {
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer closeQuietly(c)
	var exists bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: schema %s: %w", schema, err)
	}
	if exists {
		return nil
	}
	_, err = c.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		err = nil // created by another process meanwhile
	}
	if err != nil {
		return fmt.Errorf("postgres: create schema %s: %w", schema, err)
	}
	return nil
}

// Close releases the pool's connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Migrate applies pending migrations in one transaction that holds a
// transaction-scoped advisory lock (keyed by the schema), so concurrent
// processes apply each version once: the second waits, then finds the
// versions recorded in schema_migrations.
func (s *Store) Migrate(ctx context.Context) ([]int, error) { return s.migrate(ctx, math.MaxInt) }

// migrate applies the pending migrations numbered up to upTo (tests stop
// short of the latest to see what a later one does to data before it).
func (s *Store) migrate(ctx context.Context, upTo int) ([]int, error) {
	ms, err := store.ParseMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	latest := ms[len(ms)-1].Version

	// Fast path: an up-to-date schema needs no lock.
	var cur *int
	err = s.pool.QueryRow(ctx, "SELECT max(version) FROM schema_migrations").Scan(&cur)
	var pe *pgconn.PgError
	switch {
	case err == nil && cur != nil && *cur > latest:
		return nil, fmt.Errorf("%w: database at version %d, this msgq knows up to %d", store.ErrSchemaTooNew, *cur, latest)
	case err == nil && cur != nil && *cur == latest:
		return nil, nil
	case err == nil, errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
	default:
		return nil, fmt.Errorf("postgres: read schema version: %w", err)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('msgq.migrate.' || current_schema(), 0))"); err != nil {
		return nil, fmt.Errorf("postgres: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"); err != nil {
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	if err := s.renumber(ctx, tx); err != nil {
		return nil, err
	}
	done := map[int]bool{}
	rs, err := tx.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: read schema version: %w", err)
	}
	versions, err := pgx.CollectRows(rs, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("postgres: read schema version: %w", err)
	}
	for _, v := range versions {
		if v > latest {
			return nil, fmt.Errorf("%w: database at version %d, this msgq knows up to %d", store.ErrSchemaTooNew, v, latest)
		}
		done[v] = true
	}
	var applied []int
	for _, m := range ms {
		if done[m.Version] || m.Version > upTo {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("postgres: migration %s: %w", m.Name, err)
		}
		now, err := s.clock(ctx, tx)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", m.Version, now); err != nil {
			return nil, fmt.Errorf("postgres: migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
		done[m.Version] = true
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return applied, nil
}

// oldNumbers maps the versions msgq recorded before PostgreSQL's
// migrations took the numbers SQLite's carry (one change, one number on
// both stores) to those numbers: 0001 kept its number, the rest moved up
// one, and 2 (the drain's tables, which this store's 0001 already holds)
// counts as applied with 0001.
var oldNumbers = []struct{ from, to int }{
	// Highest first, so that no update meets a version not moved yet.
	{10, 11}, {9, 10}, {8, 9}, {7, 8}, {6, 7}, {5, 6}, {4, 5}, {3, 4}, {2, 3},
}

// renumber moves a schema's recorded versions to the shared numbers,
// once, under the migration lock, in the transaction that then applies
// what is pending. schema_numbering records that it was done (or that the
// schema was new, so its versions were shared from the start): without
// it, versions in schema_migrations are the old numbers. A binary from
// before the renumbering refuses a renumbered schema (its versions reach
// 11, past what it knows), so the old numbers are never read as new.
func (s *Store) renumber(ctx context.Context, tx pgx.Tx) error {
	var done bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass('schema_numbering') IS NOT NULL").Scan(&done); err != nil {
		return fmt.Errorf("postgres: migrate: renumber: %w", err)
	}
	if done {
		return nil
	}
	now, err := s.clock(ctx, tx)
	if err != nil {
		return err
	}
	var recorded bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations)").Scan(&recorded); err != nil {
		return fmt.Errorf("postgres: migrate: renumber: %w", err)
	}
	if recorded {
		for _, m := range oldNumbers {
			if _, err := tx.Exec(ctx, "UPDATE schema_migrations SET version = $2 WHERE version = $1", m.from, m.to); err != nil {
				return fmt.Errorf("postgres: migrate: renumber %d to %d: %w", m.from, m.to, err)
			}
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) SELECT 2, applied_at FROM schema_migrations WHERE version = 1"); err != nil {
			return fmt.Errorf("postgres: migrate: renumber: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE schema_numbering (scheme text PRIMARY KEY, applied_at timestamptz NOT NULL)"); err != nil {
		return fmt.Errorf("postgres: migrate: renumber: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schema_numbering (scheme, applied_at) VALUES ('shared', $1)", now); err != nil {
		return fmt.Errorf("postgres: migrate: renumber: %w", err)
	}
	return nil
}

// rowQuerier runs a one-row query: the pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// clock is the time a shared decision is made at: the database server's
// clock, read in q (the transaction making the decision, where there is
// one), so that drains, senders and operators on hosts whose clocks
// disagree still agree on leases, pacing slots, schedules, deadlines and
// ages. Options.Now replaces it in tests.
func (s *Store) clock(ctx context.Context, q rowQuerier) (time.Time, error) {
	if s.now != nil {
		return s.now().UTC().Truncate(store.Resolution), nil
	}
	var t time.Time
	if err := q.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("postgres: read the server's clock: %w", err)
	}
	return t.UTC().Truncate(store.Resolution), nil
}

// at is t when it is set, else the store's clock read in q.
func (s *Store) at(ctx context.Context, q rowQuerier, t time.Time) (time.Time, error) {
	if !t.IsZero() {
		return t.UTC().Truncate(store.Resolution), nil
	}
	return s.clock(ctx, q)
}

// ClockNow reads the store's clock: the database server's.
func (s *Store) ClockNow(ctx context.Context) (time.Time, error) { return s.clock(ctx, s.pool) }

// ClockOffsetRecord keeps a process's latest measurement (one row per
// process) and drops rows no process has refreshed for a day.
func (s *Store) ClockOffsetRecord(ctx context.Context, p *store.ClockOffset) error {
	if p.Process == "" {
		return &store.InvalidError{Field: "process", Msg: "is required"}
	}
	now, err := s.clock(ctx, s.pool)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue("INSERT INTO clock_offsets (process, host, role, offset_us, rtt_us, measured_at) VALUES ($1, $2, $3, $4, $5, $6) "+
		"ON CONFLICT (process) DO UPDATE SET host = excluded.host, role = excluded.role, offset_us = excluded.offset_us, "+
		"rtt_us = excluded.rtt_us, measured_at = excluded.measured_at",
		p.Process, p.Host, p.Role, p.Offset.Microseconds(), p.RTT.Microseconds(), now)
	b.Queue("DELETE FROM clock_offsets WHERE measured_at < $1", now.Add(-24*time.Hour))
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: record clock offset: %w", err)
	}
	return nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// beginFunc runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: %s: %w", what, err)
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: %s: commit: %w", what, err)
	}
	return nil
}
