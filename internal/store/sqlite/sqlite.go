// Package sqlite is msgq's embedded store: one SQLite file, in WAL mode with
// synchronous=FULL so that every committed claim and outcome survives a power
// cut (docs/drain.md), shared safely by many processes on one host.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/msgq/msgq/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is the SQLite implementation of store.Store.
type Store struct {
	// w has exactly one connection: SQLite admits one writer at a time, and
	// queueing writers here is far cheaper than SQLite's sleeping busy
	// handler. Other processes are kept in line by the busy timeout.
	w *sql.DB
	// r serves reads, which WAL lets run beside the writer.
	r   *sql.DB
	now func() time.Time

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // prepared once on w, keyed by statement shape

	ids *store.IDs
}

var _ store.Store = (*Store)(nil)

// Options tunes Open. The zero value is what msgq uses.
type Options struct {
	// Now is the store's clock; nil means time.Now.
	Now func() time.Time
	// BusyTimeout is how long a writer waits for another process's write
	// transaction; zero means 10s.
	BusyTimeout time.Duration
	// NoMigrate skips the automatic migration on open (msgq migrate runs it
	// explicitly and reports what it applied).
	NoMigrate bool
}

// Open opens (creating with mode 0600 if needed) the SQLite store at path
// and, unless opts.NoMigrate, brings its schema up to date.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	if err := createFile(path); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	wdsn, rdsn := dsns(path, opts)
	w, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	r, err := sql.Open("sqlite", rdsn)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)

	s := &Store{w: w, r: r, now: opts.Now, stmts: map[string]*sql.Stmt{}, ids: store.NewIDs()}
	if err := s.persistWAL(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if !opts.NoMigrate {
		if _, err := s.Migrate(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// dsns are the data source names of a store's writer (one connection)
// and readers (query_only).
func dsns(path string, opts Options) (writer, reader string) {
	q := url.Values{}
	// busy_timeout first: the pragmas after it may need a lock that another
	// process holds (switching a new file to WAL does).
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "page_size(8192)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	// A bounded page cache: a drain over a big queue must not grow with it.
	q.Add("_pragma", "cache_size(-16384)")
	// With the WAL kept between processes (persistWAL), bound what a big
	// bulk enqueue leaves behind.
	q.Add("_pragma", "journal_size_limit(67108864)")
	// Every write transaction takes the write lock up front: a deferred
	// transaction that reads and then writes can fail with SQLITE_BUSY
	// without waiting, where an immediate one waits its turn.
	q.Set("_txlock", "immediate")
	rq := url.Values{}
	rq.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	rq.Add("_pragma", "query_only(1)")
	return path + "?" + q.Encode(), path + "?" + rq.Encode()
}

// persistWAL keeps the WAL and shared-memory files when the last
// connection closes. msgq is mostly short processes (a send from a shell
// loop, a drain from cron): without this, each one deletes both files on
// exit and the next recreates them (and fsyncs the directory), about a
// millisecond and a half of a twenty-millisecond command.
func (s *Store) persistWAL(ctx context.Context) error {
	c, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: open: %w", err)
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		fc, ok := dc.(interface {
			FileControlPersistWAL(dbName string, mode int) (int, error)
		})
		if !ok {
			return nil // not this driver's connection: skip the optimisation
		}
		if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
			return fmt.Errorf("sqlite: persist WAL: %w", err)
		}
		return nil
	})
}

// createFile makes the database file (and its directory) private before
// SQLite touches it: SQLite would create it with the umask's mode, and the
// queue holds phone numbers. The WAL and shared-memory files SQLite makes
// later copy the database file's mode.
func createFile(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("sqlite: create directory for %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	if f != nil {
		return f.Close()
	}
	return nil
}

// Close releases both connection pools.
func (s *Store) Close() error {
	s.mu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.mu.Unlock()
	// Readers first: the last connection to close decides whether the WAL
	// is kept, and only the writer's is set to keep it (persistWAL).
	rerr := s.r.Close()
	return errors.Join(s.w.Close(), rerr)
}

// Migrate applies pending migrations, each in its own immediate transaction
// that re-reads the version under the write lock, so concurrent processes
// apply each migration once. The version lives in PRAGMA user_version:
// reading it costs no table lookup on the hot path of every command.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	ms, err := store.ParseMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	latest := ms[len(ms)-1].Version
	var cur int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
		return nil, fmt.Errorf("sqlite: read schema version: %w", err)
	}
	if cur > latest {
		return nil, fmt.Errorf("%w: database at version %d, this msgq knows up to %d", store.ErrSchemaTooNew, cur, latest)
	}
	if cur == latest {
		return nil, nil
	}
	var applied []int
	for _, m := range ms {
		ok, err := s.applyMigration(ctx, m)
		if err != nil {
			return applied, err
		}
		if ok {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func (s *Store) applyMigration(ctx context.Context, m store.Migration) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("sqlite: migration %s: %w", m.Name, err)
	}
	defer tx.Rollback()
	var cur int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
		return false, fmt.Errorf("sqlite: migration %s: %w", m.Name, err)
	}
	if cur >= m.Version {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("sqlite: migration %s: %w", m.Name, err)
	}
	// PRAGMA takes no bound parameters; the version is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.Version)); err != nil {
		return false, fmt.Errorf("sqlite: migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("sqlite: migration %s: %w", m.Name, err)
	}
	return true, nil
}

// txStmt returns query as a statement of tx: the cached one when stmt
// prepared it earlier, else one prepared inside tx (and closed with it).
// It must not call stmt: preparing on the writer pool while tx holds its
// only connection would wait forever.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	st, ok := s.stmts[query]
	s.mu.Unlock()
	if ok {
		return tx.StmtContext(ctx, st), nil
	}
	return tx.PrepareContext(ctx, query)
}

// stmt returns the statement for query prepared once on the writer. Call it
// only outside a write transaction. The lock is not held while preparing:
// preparing waits for the writer connection, whose holder may be waiting
// for the lock in txStmt.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	st, ok := s.stmts[query]
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.w.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.stmts[query]; ok {
		st.Close() // another goroutine prepared it meanwhile
		return prev, nil
	}
	s.stmts[query] = st
	return st, nil
}

func (s *Store) clock() time.Time { return s.now().UTC().Truncate(store.Resolution) }

// ClockNow is the host's clock: every process using the file runs on this
// host, so they all share it (a jump of the host's clock between a claim
// and its call is the drain's monotonic lease check's to catch).
func (s *Store) ClockNow(context.Context) (time.Time, error) { return s.clock(), nil }

// ClockOffsetRecord keeps nothing: a process's offset from the store's
// clock (its own host's) is zero by construction.
func (s *Store) ClockOffsetRecord(context.Context, *store.ClockOffset) error { return nil }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromNullMicros(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}
