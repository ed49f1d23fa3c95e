package versus

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"modernc.org/sqlite"

	"github.com/msgq/msgq/internal/store/aged"
)

// River's side of the aged workload: -aged completed jobs in river_job,
// written as River writes a job of messageArgs that a worker has
// completed, with what msgq's aged messages (internal/store/aged) carry:
// key aged-<g>, recipient +1444<g mod 200,000>, params ["Ada", "<g>"],
// created evenly over the 90 days before now, the newest an hour ago,
// attempted a second and finalized 1.2 seconds after creation.
//
// unique_key is River's own for UniqueOpts{ByArgs: true}: the SHA-256 of
// "&kind=message&args=" and the args with their keys sorted
// (river/internal/dbunique), so a new insert of an aged job's args is
// skipped as a duplicate, as River would skip it; unique_states is the
// default set (every state but cancelled and discarded), 0b11110101.
// versus checks that on every template it fills (riverQueue.checkAged).

// agedArgsForUnique is the args of aged job g as River hashes them: keys
// sorted, compact. SQL (both dialects) builds it from g and rcpt.
const agedArgsForUnique = `'&kind=message&args={"channel":"whatsapp","identity":"sim","key":"aged-' || g || '","lang":"en","params":["Ada","' || g || '"],"template":"order_update","to":"' || rcpt || '"}'`

// agedArgs is the args of aged job g, as the client would send them.
func agedArgs(g int) messageArgs {
	return messageArgs{
		Key: fmt.Sprintf("aged-%d", g), To: fmt.Sprintf("+1444%07d", g%200_000), Channel: "whatsapp", Identity: "sim",
		Template: "order_update", Lang: "en", Params: []string{"Ada", fmt.Sprint(g)},
	}
}

// agedTimes is when the first aged row was created and the step between
// two, in µs: internal/store/aged's spread over aged.Span.
func agedTimes(n int, now time.Time) (start, step int64) {
	return now.Add(-time.Hour - aged.Span).UnixMicro(), int64(aged.Span/time.Microsecond) / int64(n)
}

// fillRiverPostgres writes n completed jobs into the migrated, empty
// River schema over conn, in one statement, and analyzes river_job, as
// aged.Postgres does for msgq.
func fillRiverPostgres(ctx context.Context, conn *pgx.Conn, schema string, n int, now time.Time) error {
	start, step := agedTimes(n, now)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	q := `INSERT INTO ` + table + ` (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at,
			priority, args, attempted_by, kind, metadata, queue, tags, unique_key, unique_states)
		SELECT 'completed', 1, 25, created + interval '1 second', created, created + interval '1.2 seconds', created,
			1, jsonb_build_object('key', 'aged-' || g, 'to', rcpt, 'channel', 'whatsapp', 'identity', 'sim',
				'template', 'order_update', 'lang', 'en', 'params', jsonb_build_array('Ada', g::text)),
			ARRAY['versus_aged_client'], 'message', '{}', 'default', '{}',
			sha256(convert_to(` + agedArgsForUnique + `, 'UTF8')), B'11110101'
		FROM (SELECT g, to_timestamp(($2::bigint + g * $3::bigint) / 1e6) AS created,
				'+1444' || lpad((g % 200000)::text, 7, '0') AS rcpt
			FROM generate_series(1, $1::int) g) s
		ORDER BY g`
	if _, err := conn.Exec(ctx, q, n, start, step); err != nil {
		return fmt.Errorf("fill river_job: %w", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE "+table); err != nil {
		return fmt.Errorf("fill river_job: %w", err)
	}
	return nil
}

// sqliteSHA256 is the SQL function versus_sha256(text) on the SQLite
// connections of this process: SQLite has no SHA-256 of its own, and
// River's unique keys are one.
func init() {
	sqlite.MustRegisterDeterministicScalarFunction("versus_sha256", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		var b []byte
		switch v := args[0].(type) {
		case string:
			b = []byte(v)
		case []byte:
			b = v
		default:
			return nil, fmt.Errorf("versus_sha256: %T", v)
		}
		h := sha256.Sum256(b)
		return h[:], nil
	})
}

// fillRiverSQLite writes n completed jobs into the migrated, empty River
// database db in one transaction, with the columns River's SQLite driver
// writes: JSONB blobs, times as text to the millisecond, and the unique
// nonce its unique inserts put in the metadata; ids from 1, as River's
// AUTOINCREMENT gives them.
func fillRiverSQLite(ctx context.Context, db *sql.DB, n int, now time.Time) error {
	start, step := agedTimes(n, now)
	at := func(offsetMicros string) string {
		return `strftime('%Y-%m-%d %H:%M:%f', (created + ` + offsetMicros + `) / 1e6, 'unixepoch')`
	}
	q := `WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < ?1)
		INSERT INTO river_job (args, attempt, attempted_at, attempted_by, created_at, finalized_at, kind, max_attempts,
			metadata, priority, queue, state, scheduled_at, tags, unique_key, unique_states)
		SELECT jsonb(json_object('key', 'aged-' || g, 'to', rcpt, 'channel', 'whatsapp', 'identity', 'sim',
				'template', 'order_update', 'lang', 'en', 'params', json_array('Ada', CAST(g AS TEXT)))),
			1, ` + at("1000000") + `, jsonb('["versus_aged_client"]'), ` + at("0") + `, ` + at("1200000") + `, 'message', 25,
			jsonb(json_object('river:unique_nonce', lower(hex(randomblob(8))))), 1, 'default', 'completed', ` + at("0") + `,
			jsonb('[]'), versus_sha256(` + agedArgsForUnique + `), 245
		FROM (SELECT g, ?2 + g * ?3 AS created, '+1444' || printf('%07d', g % 200000) AS rcpt FROM seq)`
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, q, n, start, step); err != nil {
		return fmt.Errorf("fill river_job: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	// No ANALYZE: neither River's SQLite driver nor msgq's store runs
	// one, and aged.SQLite does not either.
	_, err = db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

// agedShape is msgq's side of the aged workload: n finished messages with
// their history and attempts (internal/store/aged), none left in flight
// (River's side has none either), sent by the drain's identity.
func agedShape(n int, now time.Time) aged.Shape {
	return aged.Shape{Messages: n, Now: now, InFlight: 0, Identity: "sim"}
}

// fillMsgqPostgres fills msgq's migrated, empty schema with n finished
// messages, then checks they are there.
func fillMsgqPostgres(ctx context.Context, url, schema string, n int, now time.Time) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := aged.Postgres(ctx, conn, schema, agedShape(n, now)); err != nil {
		return err
	}
	var got int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "messages"}.Sanitize()).Scan(&got); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("aged fill: %d messages, want %d", got, n)
	}
	return nil
}

// fillMsgqSQLite fills msgq's migrated, empty store at path, over a
// handle of its own, with n finished messages, then checks they are there.
func fillMsgqSQLite(ctx context.Context, path string, n int, now time.Time) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := aged.SQLite(ctx, db, agedShape(n, now)); err != nil {
		return err
	}
	var got int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM messages").Scan(&got); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("aged fill: %d messages, want %d", got, n)
	}
	return nil
}

// agedRetention is River's CompletedJobRetentionPeriod on a queue with
// aged jobs: longer than they go back (aged.Span and an hour).
const agedRetention = aged.Span + 10*24*time.Hour

// agedSchema is the schema of each side's aged template database (and so
// of every copy of it).
const agedSchema = "versus_aged"

// createDatabase makes a new, empty database on the server of url, named
// prefix and a number, and returns its name.
func createDatabase(ctx context.Context, url, prefix string) (string, error) {
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("aged template (the role needs CREATEDB): %w", err)
	}
	return name, nil
}

// copyDatabase makes database template_seq, a copy of template, and
// returns its name. The server copies the files (FILE_COPY: PostgreSQL 15
// would otherwise write every page of it to the WAL), so the copy has the
// template's rows, indexes and planner statistics, as filled.
func copyDatabase(ctx context.Context, url, template string, seq int) (string, error) {
	name := fmt.Sprintf("%s_%d", template, seq)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var version int
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return "", err
	}
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	if version >= 150000 {
		q += " STRATEGY FILE_COPY"
	}
	if _, err := c.Exec(ctx, q); err != nil {
		return "", fmt.Errorf("copy of the aged template: %w", err)
	}
	// The copy leaves its files dirty in the kernel's page cache (the
	// server copied them outside the WAL): written back during the timed
	// work, they would slow whichever side copied more (msgq's store holds
	// its history and attempts too: 2.2 GiB against River's 0.7 at a
	// million rows), and a run measured 0.39 where a settled one gives
	// 0.80. Both sides start with them on disk.
	if _, err := c.Exec(ctx, "CHECKPOINT"); err != nil {
		return "", fmt.Errorf("checkpoint after the copy: %w", err)
	}
	syscall.Sync()
	return name, nil
}

// dropDatabase drops database name; its connections must be closed (the
// server waits a few seconds for backends still exiting).
func dropDatabase(url, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	return err
}

// withDB returns the PostgreSQL URL u naming database db instead; a
// keyword/value connection string gets dbname appended (the last one
// counts).
func withDB(u, db string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return u + " dbname=" + db
	}
	p.Path = "/" + db
	p.RawPath = ""
	return p.String()
}

// copyFile copies the SQLite template at from, checkpointed and closed,
// to a new file at to.
func copyFile(from, to string) error {
	if fi, err := os.Stat(from + "-wal"); err == nil && fi.Size() > 0 {
		return fmt.Errorf("aged template %s has a WAL of %d bytes: not checkpointed", from, fi.Size())
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	// On disk before the timed work starts, as copyDatabase's copies.
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// templateSize says how large side sd's aged template on store st is,
// for the log: copying it is part of each run's (untimed) set-up.
func templateSize(ctx context.Context, o *Options, st string, sd side) string {
	var name string
	switch x := sd.(type) {
	case riverSide:
		name = x.aged[st]
	case msgqSide:
		name = x.aged[st]
	}
	var bytes int64
	switch st {
	case storePostgres:
		c, err := pgx.Connect(ctx, o.PostgresURL)
		if err != nil {
			return "size unknown"
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, "SELECT pg_database_size($1)", name).Scan(&bytes); err != nil {
			return "size unknown"
		}
	case storeSQLite:
		fi, err := os.Stat(name)
		if err != nil {
			return "size unknown"
		}
		bytes = fi.Size()
	}
	return fmt.Sprintf("%.0f MiB", float64(bytes)/(1<<20))
}
