package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestSQLEnqueueThroughAPooler: an application behind a transaction-mode
// pgbouncer (MSGQ_TEST_PGBOUNCER_URL), as most production PostgreSQL is,
// calls enqueue() as documented: a commit leaves the row (in intake), a
// rollback none, a replay (in or out of a transaction) answers the same
// id, bad input arrives as MQ422 with its column and a conflict as MQ409
// with its DETAIL, whichever server
// connection each transaction was given. Both of the query modes a
// pooled application uses (no named prepared statements) are run.
func TestSQLEnqueueThroughAPooler(t *testing.T) {
	direct, pooler := testURL(t), poolerURL(t)
	t.Parallel()
	ctx := context.Background()
	schema := freshSchema(t, direct)
	h := open(t, direct, schema, Options{})
	if err := h.SQLIdentitiesRecord(ctx, []store.SQLIdentity{{Name: "sim", Default: true}}); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(pooler)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = mode
			cfg.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			app := &sqlApp{schema: schema}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := pooledEnqueues(ctx, h, pool, app, fmt.Sprintf("pooled-%d-%d", i, g)); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// pooledEnqueues commits one enqueue(), rolls one back and replays the
// first, through pool, checking each against the store.
func pooledEnqueues(ctx context.Context, h *handle, pool *pgxpool.Pool, app *sqlApp, key string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	id, err := app.enqueue(ctx, tx, "key", key, "to_addr", "+15551234567", "text", "through pgbouncer")
	if err != nil {
		tx.Rollback(ctx)
		return fmt.Errorf("%s: enqueue: %w", key, err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the transaction goes on, on its server connection
		tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: commit: %w", key, err)
	}
	if m, err := h.MessageGet(ctx, "", id); err != nil || m.Key != key || m.To != "+15551234567" || m.State != state.Intake {
		return fmt.Errorf("%s: after commit the store has %+v, %v", key, m, err)
	}

	tx, err = pool.Begin(ctx)
	if err != nil {
		return err
	}
	gone, err := app.enqueue(ctx, tx, "key", key+"-rolled-back", "to_addr", "+15551234567", "text", "never sent")
	if err != nil {
		tx.Rollback(ctx)
		return fmt.Errorf("%s: enqueue before rollback: %w", key, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		return err
	}
	if m, err := h.MessageGet(ctx, "", gone); !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s: after rollback the store has %+v, %v; want none", key, m, err)
	}
	var n int
	if err := h.pool.QueryRow(ctx, "SELECT count(*) FROM messages WHERE key = $1", key+"-rolled-back").Scan(&n); err != nil || n != 0 {
		return fmt.Errorf("%s: %d rows of the rolled-back key, %v", key, n, err)
	}

	// A replay: out of a transaction, then in one.
	again, err := app.enqueue(ctx, pool, "key", key, "to_addr", "+15551234567", "text", "through pgbouncer")
	if err != nil || again != id {
		return fmt.Errorf("%s: replay: %q, %v; want %s", key, again, err, id)
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		return err
	}
	again, err = app.enqueue(ctx, tx, "key", key, "to_addr", "+15551234567", "text", "through pgbouncer")
	if cerr := tx.Commit(ctx); err == nil {
		err = cerr
	}
	if err != nil || again != id {
		return fmt.Errorf("%s: replay in a transaction: %q, %v; want %s", key, again, err, id)
	}

	// Bad input: its SQLSTATE and column come through the pooler.
	_, err = app.enqueue(ctx, pool, "key", key+" bad", "to_addr", "+15551234567", "text", "hi")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "MQ422" || pe.ColumnName != "key" {
		return fmt.Errorf("%s: bad key: %v; want MQ422 naming key", key, err)
	}
	// A conflict: MQ409 with the existing id as DETAIL.
	_, err = app.enqueue(ctx, pool, "key", key, "to_addr", "+15551234567", "text", "other content")
	if !errors.As(err, &pe) || pe.Code != "MQ409" || pe.Detail != id {
		return fmt.Errorf("%s: conflict: %v; want MQ409 with DETAIL %s", key, err, id)
	}
	return nil
}
