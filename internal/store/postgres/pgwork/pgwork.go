// Package pgwork counts the work PostgreSQL did on a schema's tables: the
// rows its scans read and the buffers they touched, from the server's
// cumulative statistics (pg_stat_user_tables, pg_statio_user_tables).
//
// Tests use it to guard costs without timing anything: a statement whose
// plan reads a whole table does work in proportion to the table, which
// shows in these counts on an idle machine and a loaded one alike
// (internal/drain/scale_test.go, internal/store/postgres/scale_test.go).
//
// The server publishes a backend's counts when the backend ends (or, while
// it lives, at most once a second and only when it is idle), so a
// measurement closes every connection that did the work and waits for
// their backends to end (Idle) before it reads (Read).
package pgwork

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Table is the work done on one table, its indexes and its TOAST.
type Table struct {
	SeqScans    int64 // sequential scans started
	SeqRows     int64 // rows those scans read
	IndexRows   int64 // rows fetched through indexes
	Blocks      int64 // buffers touched: heap, index and TOAST, hit or read
	Inserted    int64
	Updated     int64
	Deleted     int64
	HotUpdated  int64
	IndexScans  int64
	LiveRowsEst int64 // n_live_tup: the table's size, for reports
	// Indexes is the work through each index, by index name: where a
	// table's rows by index came from, for a failure message.
	Indexes map[string]Index
}

// Index is the work done through one index.
type Index struct {
	Scans   int64 // scans started
	Read    int64 // index entries returned (idx_tup_read)
	Fetched int64 // live rows fetched from the table through it (idx_tup_fetch)
}

// Work is a schema's counts at one moment, by table.
type Work map[string]Table

// Rows is the rows read by every scan, sequential or through an index.
func (w Work) Rows() int64 {
	var n int64
	for _, t := range w {
		n += t.SeqRows + t.IndexRows
	}
	return n
}

// Blocks is the buffers touched on every table.
func (w Work) Blocks() int64 {
	var n int64
	for _, t := range w {
		n += t.Blocks
	}
	return n
}

// Sub is the work done between before and w.
func (w Work) Sub(before Work) Work {
	out := Work{}
	for name, a := range w {
		b := before[name]
		out[name] = Table{
			SeqScans: a.SeqScans - b.SeqScans, SeqRows: a.SeqRows - b.SeqRows, IndexRows: a.IndexRows - b.IndexRows,
			Blocks: a.Blocks - b.Blocks, Inserted: a.Inserted - b.Inserted, Updated: a.Updated - b.Updated,
			Deleted: a.Deleted - b.Deleted, HotUpdated: a.HotUpdated - b.HotUpdated, IndexScans: a.IndexScans - b.IndexScans,
			LiveRowsEst: a.LiveRowsEst,
		}
		if len(a.Indexes) > 0 {
			t := out[name]
			t.Indexes = map[string]Index{}
			for ix, ai := range a.Indexes {
				bi := b.Indexes[ix]
				t.Indexes[ix] = Index{Scans: ai.Scans - bi.Scans, Read: ai.Read - bi.Read, Fetched: ai.Fetched - bi.Fetched}
			}
			out[name] = t
		}
	}
	return out
}

// String lists the tables that did any work, one a line, for a failure
// message: where the work went.
func (w Work) String() string {
	var names []string
	for name, t := range w {
		if t.SeqRows != 0 || t.IndexRows != 0 || t.Blocks != 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		t := w[name]
		fmt.Fprintf(&b, "  %-20s seq scans %d reading %d rows, %d rows by index (%d scans), %d buffers, %d inserted, %d updated\n",
			name, t.SeqScans, t.SeqRows, t.IndexRows, t.IndexScans, t.Blocks, t.Inserted, t.Updated)
		var ixs []string
		for ix, i := range t.Indexes {
			if i.Scans != 0 || i.Read != 0 {
				ixs = append(ixs, ix)
			}
		}
		sort.Strings(ixs)
		for _, ix := range ixs {
			i := t.Indexes[ix]
			fmt.Fprintf(&b, "      %-30s %d scans, %d entries read, %d rows fetched\n", ix, i.Scans, i.Read, i.Fetched)
		}
	}
	return b.String()
}

// Read returns schema's counts as the server has them now. conn must not
// be one of the connections whose work is being counted.
func Read(ctx context.Context, conn *pgx.Conn, schema string) (Work, error) {
	// A snapshot taken earlier in this session would answer again.
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("pgwork: %w", err)
	}
	rs, err := conn.Query(ctx, `SELECT t.relname, t.seq_scan, t.seq_tup_read, coalesce(t.idx_scan, 0), coalesce(t.idx_tup_fetch, 0),
		t.n_tup_ins, t.n_tup_upd, t.n_tup_del, t.n_tup_hot_upd, t.n_live_tup,
		coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0) + coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0)
			+ coalesce(io.toast_blks_hit, 0) + coalesce(io.toast_blks_read, 0) + coalesce(io.tidx_blks_hit, 0) + coalesce(io.tidx_blks_read, 0)
	FROM pg_stat_user_tables t JOIN pg_statio_user_tables io ON io.relid = t.relid
	WHERE t.schemaname = $1`, schema)
	if err != nil {
		return nil, fmt.Errorf("pgwork: %w", err)
	}
	defer rs.Close()
	w := Work{}
	for rs.Next() {
		var name string
		var t Table
		if err := rs.Scan(&name, &t.SeqScans, &t.SeqRows, &t.IndexScans, &t.IndexRows, &t.Inserted, &t.Updated, &t.Deleted,
			&t.HotUpdated, &t.LiveRowsEst, &t.Blocks); err != nil {
			return nil, fmt.Errorf("pgwork: %w", err)
		}
		w[name] = t
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgwork: %w", err)
	}
	rs, err = conn.Query(ctx, `SELECT relname, indexrelname, idx_scan, idx_tup_read, idx_tup_fetch
	FROM pg_stat_user_indexes WHERE schemaname = $1`, schema)
	if err != nil {
		return nil, fmt.Errorf("pgwork: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var table, name string
		var i Index
		if err := rs.Scan(&table, &name, &i.Scans, &i.Read, &i.Fetched); err != nil {
			return nil, fmt.Errorf("pgwork: %w", err)
		}
		t := w[table]
		if t.Indexes == nil {
			t.Indexes = map[string]Index{}
		}
		t.Indexes[name] = i
		w[table] = t
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgwork: %w", err)
	}
	return w, nil
}

// Idle waits until no backend of application_name app is left, so that
// all their counts are published; it gives up after a minute. (A backend
// publishes at exit; the wait is for the server to finish ending the
// backends the client has already closed.)
func Idle(ctx context.Context, conn *pgx.Conn, app string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			return fmt.Errorf("pgwork: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgwork: %d connections of %s are still open after a minute", n, app)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NoAutovacuum turns autovacuum off for every table of schema, so that
// neither its scans nor its ANALYZE's new statistics land in the middle
// of a measurement. Plans then rest on the statistics the test gave the
// tables (or none), as they do on a busy queue between autovacuum runs.
func NoAutovacuum(ctx context.Context, conn *pgx.Conn, schema string) error {
	rs, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
	if err != nil {
		return fmt.Errorf("pgwork: %w", err)
	}
	names, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("pgwork: %w", err)
	}
	for _, n := range names {
		q := "ALTER TABLE " + pgx.Identifier{schema, n}.Sanitize() + " SET (autovacuum_enabled = false)"
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("pgwork: %w", err)
		}
	}
	return nil
}
