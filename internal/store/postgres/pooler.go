package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgq/msgq/internal/store"
)

// A transaction pooler (pgbouncer pool_mode=transaction, RDS Proxy,
// Supavisor) lends this client a server connection for one transaction
// at a time, and the next transaction may run on another. Whatever a
// session keeps is then not ours to keep: prepared statements (pgx's
// statement cache names them, and a second client meets the first one's
// "stmtcache_..." on the server: 42P05), LISTEN, session-level advisory
// locks, SET and the settings given at connect time (search_path,
// options). Behind one, the store
//   - runs every statement with the extended protocol's unnamed statement
//     (pgx's QueryExecModeExec: parse, bind and execute in one round trip)
//     and caches nothing;
//   - applies the URL's settings to each transaction with
//     set_config(name, value, true), in the same round trip as the
//     transaction's first statement;
//   - takes only transaction-scoped advisory locks (pg_advisory_xact_lock)
//     and row locks, as everywhere else in this package;
//   - does not LISTEN: Enqueued says why, and a drain polls instead.

// The pooler URL parameter: msgq's own, never sent to the server.
const poolerParam = "pooler"

// Pooler modes.
const (
	poolerAuto        = "auto"        // detect (the default)
	poolerTransaction = "transaction" // behind a transaction pooler: keep nothing between transactions
	poolerNone        = "none"        // a server, or a session pooler: sessions last
)

// ErrNoWakeups is what Enqueued returns behind a transaction pooler.
var ErrNoWakeups = errors.New("no wake-ups for enqueues behind a transaction pooler (LISTEN does not outlast a transaction there)")

// trackedParams are the startup parameters pgbouncer accepts and carries
// over to whichever server connection it lends (the only ones it does).
// Every other one is applied per transaction behind a pooler.
var trackedParams = map[string]bool{
	"application_name": true, "client_encoding": true, "datestyle": true,
	"timezone": true, "standard_conforming_strings": true,
}

// takePoolerMode removes the pooler parameter from params (it is not a
// server setting) and returns its value.
func takePoolerMode(params map[string]string) (string, error) {
	mode, ok := params[poolerParam]
	delete(params, poolerParam)
	switch {
	case !ok || mode == poolerAuto:
		return poolerAuto, nil
	case mode == poolerTransaction, mode == poolerNone:
		return mode, nil
	}
	return "", &store.InvalidError{Msg: fmt.Sprintf("pooler=%q in the URL: want auto (the default: detect a pooler), transaction (a transaction pooler is in front of the server) or none (there is none, or it keeps sessions)", mode)}
}

// safeConfig is cc trimmed to what works both on a server and through a
// transaction pooler, with the simple protocol: the schema creation of
// Options.Schema connects with it, before the pool exists.
func safeConfig(cc *pgx.ConnConfig) *pgx.ConnConfig {
	c := cc.Copy()
	trimForPooler(c)
	c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return c
}

// trimForPooler sets cc up for a transaction pooler: unnamed statements,
// no caches, and only the startup parameters a pooler carries over.
func trimForPooler(cc *pgx.ConnConfig) {
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cc.StatementCacheCapacity, cc.DescriptionCacheCapacity = 0, 0
	for k := range cc.RuntimeParams {
		if !trackedParams[strings.ToLower(k)] {
			delete(cc.RuntimeParams, k)
		}
	}
}

// settingsOf returns the startup settings of cc that a transaction pooler
// would refuse (or pass to one server connection only): what options
// sets, then the other parameters by name, as on a server, where a
// parameter of its own beats the same one in options. Options that are
// not settings are an *store.InvalidError.
func settingsOf(cc *pgx.ConnConfig) ([][2]string, error) {
	var settings [][2]string
	if opts, ok := cc.RuntimeParams["options"]; ok {
		s, err := parseOptions(opts)
		if err != nil {
			return nil, err
		}
		settings = append(settings, s...)
	}
	var names []string
	for k := range cc.RuntimeParams {
		if !trackedParams[strings.ToLower(k)] && k != "options" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		settings = append(settings, [2]string{k, cc.RuntimeParams[k]})
	}
	return settings, nil
}

// setConfigSQL is the statement that makes settings, for the current
// transaction only (local) or for the session; empty when there are none.
// It has no arguments, so that it can follow a BEGIN in one message.
func setConfigSQL(settings [][2]string, local bool) string {
	if len(settings) == 0 {
		return ""
	}
	calls := make([]string, len(settings))
	for i, s := range settings {
		calls[i] = "set_config(" + quoteLiteral(s[0]) + ", " + quoteLiteral(s[1]) + ", " + fmt.Sprint(local) + ")"
	}
	return "SELECT " + strings.Join(calls, ", ")
}

// errReconnect discards the pool's first connection, on a server, when
// the URL has settings that only a connection's startup can make: the
// next one is made with them.
var errReconnect = errors.New("postgres: reconnect with the URL's startup settings")

// detector finds out, on the pool's first connection, whether a pooler
// answers for the server: the process id the connection announced at
// startup (BackendKeyData, which a client needs to cancel its queries)
// is not the process that runs its statements (pg_backend_pid()). A
// pooler that lends server connections per transaction must announce one
// of its own, as the client has no one server process. A plain TCP proxy
// passes the server's through, and so does a pooler that gives each
// client one server connection for good (pgpool-II): both keep sessions.
// pgbouncer announces its own in session mode too; that is taken for
// transaction pooling (safe, without wake-ups), and pooler=none says
// otherwise.
//
// Until it knows, a connection is made as for a pooler (a pooler would
// refuse search_path or options at startup). The first one, on a server,
// then makes the URL's settings for its session (or, when only a startup
// can make them, is replaced); the later ones are made with the URL's
// configuration as it is, and keep a statement cache.
//
// The first one has none: every statement on it is parsed and planned
// again (for one enqueue after another, that was about 40% of the
// server's CPU per message). On a server it is therefore
// retired once it has been lent probeUses times (prepareConn), and the
// pool makes its replacement with the statement cache. A short-lived
// command never gets there, so it pays no second connection.
type detector struct {
	mu       sync.Mutex
	decided  bool
	pooled   string
	settings [][2]string
	bad      error // the URL's options are not settings

	probe     atomic.Pointer[pgx.Conn] // the first connection, on a server, until retired
	probeUses atomic.Int32
}

// probeUses is how many times the first connection (made without a
// statement cache) is lent on a server before it is retired.
const probeUses = 64

// prepareConn is the pool's PrepareConn, called as a connection is
// lent: false (destroy it, and lend another) when c is the first
// connection and has served its probeUses. It runs in the Acquire, so
// the caller gets the new connection at once; a pool's AfterRelease
// would instead hand every released connection back from a goroutine of
// its own, and a caller acquiring right after would meet none idle and
// have the pool open another.
func (d *detector) prepareConn(_ context.Context, c *pgx.Conn) (bool, error) {
	if p := d.probe.Load(); p == nil || p != c {
		return true, nil
	}
	if d.probeUses.Add(1) <= probeUses {
		return true, nil
	}
	d.probe.Store(nil)
	return false, nil
}

func (d *detector) beforeConnect(_ context.Context, cc *pgx.ConnConfig) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.decided || d.pooled != "" {
		trimForPooler(cc)
	}
	return nil
}

func (d *detector) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.decided {
		return nil
	}
	var pid int64
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return err
	}
	d.decided = true
	if announced := int64(conn.PgConn().PID()); announced != pid {
		d.pooled = fmt.Sprintf("a pooler was detected: the connection announced process %d, the server runs it as %d; pooler=none in the URL says otherwise", announced, pid)
		return nil
	}
	if d.bad != nil {
		return errReconnect
	}
	if len(d.settings) > 0 {
		if _, err := conn.Exec(ctx, setConfigSQL(d.settings, false)); err != nil {
			return errReconnect
		}
	}
	d.probe.Store(conn)
	return nil
}

// parseOptions reads libpq's options (PGOPTIONS): command-line switches
// for the server, separated by spaces, a backslash escaping a space or
// a backslash. Of those only settings (-c name=value, --name=value) can
// be applied per transaction; anything else is refused.
func parseOptions(opts string) ([][2]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(opts); i++ {
		c := opts[i]
		switch {
		case c == '\\' && i+1 < len(opts):
			i++
			w.WriteByte(opts[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	bad := func(why string) error {
		return &store.InvalidError{Msg: fmt.Sprintf("options %q in the URL: %s; behind a transaction pooler msgq applies settings (-c name=value, --name=value) to each transaction, and nothing else can be", opts, why)}
	}
	var out [][2]string
	for i := 0; i < len(words); i++ {
		var kv string
		switch word := words[i]; {
		case word == "-c":
			if i+1 == len(words) {
				return nil, bad("-c without a setting")
			}
			i++
			kv = words[i]
		case strings.HasPrefix(word, "-c"):
			kv = word[2:]
		case strings.HasPrefix(word, "--"):
			kv = word[2:]
		default:
			return nil, bad(fmt.Sprintf("%q is not a setting", word))
		}
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, bad(fmt.Sprintf("%q is not name=value", kv))
		}
		// The server spells - in a setting's name as _.
		out = append(out, [2]string{strings.ReplaceAll(name, "-", "_"), val})
	}
	return out, nil
}

// quoteLiteral quotes s as an SQL string literal, whatever
// standard_conforming_strings says (the escape form when s has a
// backslash).
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// db is what the store runs its statements on: the pool, with the URL's
// settings applied to each transaction when a transaction pooler keeps
// them from lasting (local, the statement that applies them, is then
// set). Statements outside a transaction go in a batch after local:
// before a batch's Sync they are one transaction, in one round trip. A
// transaction runs local with its BEGIN. Nothing in the store may
// Acquire a connection of the pool around this.
type db struct {
	*pgxpool.Pool
	local string
}

func (d *db) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if d.local == "" {
		return d.Pool.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(d.local)
	b.Queue(sql, args...)
	br := d.Pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (d *db) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if d.local == "" {
		return d.Pool.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(d.local)
	b.Queue(sql, args...)
	br := d.Pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rs, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rs, br: br}, nil
}

func (d *db) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if d.local == "" {
		return d.Pool.QueryRow(ctx, sql, args...)
	}
	rs, err := d.Query(ctx, sql, args...)
	return &row{rs: rs, err: err}
}

func (d *db) Begin(ctx context.Context) (pgx.Tx, error) {
	return d.BeginTx(ctx, pgx.TxOptions{})
}

func (d *db) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	if d.local != "" && o.BeginQuery == "" {
		// Without arguments pgx sends this with the simple protocol, where
		// the two statements are one message.
		o.BeginQuery = beginSQL(o) + "; " + d.local
	}
	return d.Pool.BeginTx(ctx, o)
}

func (d *db) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if d.local == "" {
		return d.Pool.SendBatch(ctx, b)
	}
	nb := &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery{{SQL: d.local}}, b.QueuedQueries...)}
	return &batchAfterLocal{BatchResults: d.Pool.SendBatch(ctx, nb)}
}

// beginSQL is the BEGIN that pgx itself would send for o.
func beginSQL(o pgx.TxOptions) string {
	s := "begin"
	if o.IsoLevel != "" {
		s += " isolation level " + string(o.IsoLevel)
	}
	if o.AccessMode != "" {
		s += " " + string(o.AccessMode)
	}
	if o.DeferrableMode != "" {
		s += " " + string(o.DeferrableMode)
	}
	return s
}

// batchAfterLocal hides the result of the settings statement db put
// first in a batch.
type batchAfterLocal struct {
	pgx.BatchResults
	skipped bool
	err     error
}

func (b *batchAfterLocal) skip() error {
	if !b.skipped {
		b.skipped = true
		_, b.err = b.BatchResults.Exec()
	}
	return b.err
}

func (b *batchAfterLocal) Exec() (pgconn.CommandTag, error) {
	if err := b.skip(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return b.BatchResults.Exec()
}

func (b *batchAfterLocal) Query() (pgx.Rows, error) {
	if err := b.skip(); err != nil {
		return nil, err
	}
	return b.BatchResults.Query()
}

func (b *batchAfterLocal) QueryRow() pgx.Row {
	if err := b.skip(); err != nil {
		return &row{err: err}
	}
	return b.BatchResults.QueryRow()
}

func (b *batchAfterLocal) Close() error {
	err := b.skip()
	if cerr := b.BatchResults.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRows are the rows of a statement db sent in a batch: read to the
// end, they close the batch (its Sync commits), and what that reports is
// in Err, as the end of a statement's rows reports its own commit.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.closed {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// row is QueryRow over Query, as pgx's own.
type row struct {
	rs  pgx.Rows
	err error
}

func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rs.Close()
	if !r.rs.Next() {
		if err := r.rs.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rs.Scan(dest...); err != nil {
		return err
	}
	r.rs.Close()
	return r.rs.Err()
}
