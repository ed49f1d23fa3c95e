package versus

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// writes is what one PostgreSQL table took: rows inserted, updated and
// deleted, from the server's statistics.
type writes struct{ ins, upd, del int64 }

// tally is a schema's writes by table.
type tally map[string]writes

// schemaTally reads the writes of every table in schema once every
// connection that wrote them has closed (a backend flushes its statistics
// when it exits, a moment after its client goes), waiting until two reads
// agree.
func schemaTally(url, schema string) (tally, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	var last tally
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		rs, err := c.Query(ctx, "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = $1", schema)
		if err != nil {
			return nil, err
		}
		t := tally{}
		var name string
		var w writes
		_, err = pgx.ForEachRow(rs, []any{&name, &w.ins, &w.upd, &w.del}, func() error { t[name] = w; return nil })
		if err != nil {
			return nil, err
		}
		if last != nil && fmt.Sprint(last) == fmt.Sprint(t) {
			return t, nil
		}
		last = t
	}
	return last, nil
}

// writeTallies prints, per side, the rows each table took per message over
// the whole life of N messages: bulk insert, the replay check, and work.
func writeTallies(w io.Writer, o *Options, ts map[string]tally) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "\nPostgreSQL rows written per message over its whole life (bulk insert, %d replays, work), run 1, from pg_stat_user_tables:\n", min(o.N, 100))
	for _, sd := range []string{"River", "msgq"} {
		t, ok := ts[sd]
		if !ok {
			continue
		}
		var parts []string
		var sum writes
		names := make([]string, 0, len(t))
		for name := range t {
			names = append(names, name)
		}
		slices.Sort(names)
		n := float64(o.N)
		for _, name := range names {
			x := t[name]
			sum.ins, sum.upd, sum.del = sum.ins+x.ins, sum.upd+x.upd, sum.del+x.del
			if float64(x.ins+x.upd+x.del)/n < 0.005 {
				continue // bookkeeping rows, not per message
			}
			parts = append(parts, fmt.Sprintf("%s %.2f/%.2f/%.2f", name, float64(x.ins)/n, float64(x.upd)/n, float64(x.del)/n))
		}
		fmt.Fprintf(w, "  %-5s inserted/updated/deleted: total %.2f/%.2f/%.2f; %s\n", sd,
			float64(sum.ins)/n, float64(sum.upd)/n, float64(sum.del)/n, strings.Join(parts, ", "))
	}
}
