package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

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
// transaction pooler: the simple protocol, no statement cache, and only
// the startup parameters a pooler carries over. The probe and the schema
// creation connect with it.
func safeConfig(cc *pgx.ConnConfig) *pgx.ConnConfig {
	c := cc.Copy()
	c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c.StatementCacheCapacity, c.DescriptionCacheCapacity = 0, 0
	for k := range c.RuntimeParams {
		if !trackedParams[strings.ToLower(k)] {
			delete(c.RuntimeParams, k)
		}
	}
	return c
}

// probePooler connects with safeConfig(cc) and says whether a pooler
// answers for the server: the process id the connection announced at
// startup (BackendKeyData, which a client needs to cancel its queries)
// is not the process that runs them (pg_backend_pid()). A pooler that
// lends server connections per transaction must announce one of its
// own, since the client has no one server process. A plain TCP proxy
// passes the server's through, and so does a session pooler that hands
// each client one server connection for good (pgpool-II): both keep
// sessions. pgbouncer announces its own in session mode too: that case
// is taken as transaction pooling (safe, but without wake-ups), and
// pooler=none says otherwise. The connection is returned open, for the
// caller's own use before the pool exists.
func probePooler(ctx context.Context, cc *pgx.ConnConfig) (*pgx.Conn, string, error) {
	conn, err := pgx.ConnectConfig(ctx, safeConfig(cc))
	if err != nil {
		return nil, "", fmt.Errorf("postgres: connect: %w", err)
	}
	var pid int64
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		closeQuietly(conn)
		return nil, "", fmt.Errorf("postgres: connect: %w", err)
	}
	if announced := int64(conn.PgConn().PID()); announced != pid {
		return conn, fmt.Sprintf("a pooler was detected: the connection announced process %d, the server runs it as %d; pooler=none in the URL says otherwise", announced, pid), nil
	}
	return conn, "", nil
}

// usePooler sets cfg up for a transaction pooler and returns the
// statement that applies the startup settings it took out of the
// connection (empty when there are none).
func usePooler(cfg *pgxpool.Config) (string, error) {
	cc := cfg.ConnConfig
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cc.StatementCacheCapacity, cc.DescriptionCacheCapacity = 0, 0
	var settings [][2]string
	if opts, ok := cc.RuntimeParams["options"]; ok {
		s, err := parseOptions(opts)
		if err != nil {
			return "", err
		}
		settings = append(settings, s...)
		delete(cc.RuntimeParams, "options")
	}
	// After options, as on a server, where a parameter of its own beats
	// the same one in options.
	var names []string
	for k := range cc.RuntimeParams {
		if !trackedParams[strings.ToLower(k)] {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		settings = append(settings, [2]string{k, cc.RuntimeParams[k]})
		delete(cc.RuntimeParams, k)
	}
	if len(settings) == 0 {
		return "", nil
	}
	calls := make([]string, len(settings))
	for i, s := range settings {
		calls[i] = "set_config(" + quoteLiteral(s[0]) + ", " + quoteLiteral(s[1]) + ", true)"
	}
	return "SELECT " + strings.Join(calls, ", "), nil
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
