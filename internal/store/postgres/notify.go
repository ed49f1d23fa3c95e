package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
)

// notifyChannel is the one channel msgq notifies on. Notifications are per
// database, and several queues may share one in their own schemas, so the
// payload names the schema and listeners ignore other schemas'.
const notifyChannel = "msgq_enqueued"

// notifySQL is run by an enqueue that inserted rows; PostgreSQL delivers
// it when the transaction commits, once however many rows it held.
const notifySQL = "SELECT pg_notify('" + notifyChannel + "', current_schema())"

var _ store.Listener = (*Store)(nil)

// Enqueued listens on its own connection (outside the pool, which it
// would otherwise hold for good) and signals the returned channel for each
// notification about this store's schema. A lost connection is re-opened
// with backoff, and the channel is signalled once it is back, since rows
// may have been enqueued meanwhile. The first LISTEN is done before
// Enqueued returns, so no enqueue committed after that is missed.
//
// Behind a transaction pooler a LISTEN lasts as long as the transaction
// that sent it: Enqueued returns ErrNoWakeups, saying why the store takes
// a pooler to be there. Enqueues still NOTIFY, for drains that reach the
// server directly.
func (s *Store) Enqueued(ctx context.Context) (<-chan struct{}, error) {
	if s.pooled != "" {
		return nil, fmt.Errorf("postgres: %w: %s", ErrNoWakeups, s.pooled)
	}
	conn, schema, err := s.listen(ctx)
	if err != nil {
		return nil, err
	}
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default: // one pending wake-up is as good as many
		}
	}
	go func() {
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			if conn == nil {
				if conn, schema, err = s.listen(ctx); err != nil {
					s.log.Warn("listening for enqueues failed; retrying", "err", err, "in", backoff)
					sleepCtx(ctx, backoff)
					backoff = min(backoff*2, 5*time.Second)
					continue
				}
				backoff = 100 * time.Millisecond
				signal()
			}
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				closeQuietly(conn)
				conn = nil
				continue
			}
			if n.Payload == schema {
				signal()
			}
		}
		if conn != nil {
			closeQuietly(conn)
		}
	}()
	return wake, nil
}

// listen opens a connection like the pool's and LISTENs on it.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, "", fmt.Errorf("postgres: listen: %w", err)
	}
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		closeQuietly(conn)
		return nil, "", fmt.Errorf("postgres: listen: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		closeQuietly(conn)
		return nil, "", fmt.Errorf("postgres: listen: %w", err)
	}
	return conn, schema, nil
}

func closeQuietly(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
