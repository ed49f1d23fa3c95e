package drain_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/storetest"
)

// postgresStore opens a store on the test server in a schema of its own,
// dropped when t ends. PostgreSQL tests skip without
// MSGQ_TEST_POSTGRES_URL, and fail without it in CI.
func postgresStore(t *testing.T) (*postgres.Store, func() *postgres.Store) {
	t.Helper()
	s, open, _ := postgresSchema(t)
	return s, open
}

// postgresSchema is postgresStore, and the schema's name.
func postgresSchema(t *testing.T) (*postgres.Store, func() *postgres.Store, string) {
	t.Helper()
	url := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_POSTGRES_URL is not set: PostgreSQL tests must not skip in CI")
		}
		t.Skip("MSGQ_TEST_POSTGRES_URL is not set")
	}
	b := make([]byte, 8)
	rand.Read(b)
	schema := "msgq_drain_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	open := func() *postgres.Store {
		s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), open, schema
}

// claimWatch is a store that reports each claim that found nothing.
type claimWatch struct {
	*postgres.Store
	once  sync.Once
	empty chan struct{}
}

func (w *claimWatch) MessageClaim(ctx context.Context, p *store.ClaimParams) ([]store.Claimed, error) {
	cs, err := w.Store.MessageClaim(ctx, p)
	if err == nil && len(cs) == 0 {
		w.once.Do(func() { close(w.empty) })
	}
	return cs, err
}

// TestFollowWakesWhenRowsAreEnqueued: an idle drain --follow on
// PostgreSQL whose poll interval is an hour still sends a row enqueued by
// another process at once: the enqueue's NOTIFY wakes it.
func TestFollowWakesWhenRowsAreEnqueued(t *testing.T) {
	t.Parallel()
	s, open := postgresStore(t)
	w := &claimWatch{Store: s, empty: make(chan struct{})}
	cfg := config(w, sim.New(sim.DefaultConfig()).Provider())
	cfg.Follow, cfg.IdlePoll = true, time.Hour
	ctx, stop := context.WithCancel(context.Background())
	type result struct {
		sum drain.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := drain.Run(ctx, cfg)
		done <- result{sum, err}
	}()
	select {
	case <-w.empty:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain never claimed")
	}
	// The drain found nothing and now waits, for an hour unless woken.
	sender := open()
	m, err := sender.MessageEnqueue(context.Background(), ptr(storetest.Params("late")))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := sender.MessageGet(context.Background(), store.DefaultTenant, m.Message.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == state.Sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("row still %s 30 s after it was enqueued: the idle drain was not woken", got.State)
		}
	}
	stop()
	r := <-done
	if r.err != nil || r.sum.Sent != 1 {
		t.Errorf("drain: %+v, %v; want one sent", r.sum, r.err)
	}
}

func ptr[T any](v T) *T { return &v }
