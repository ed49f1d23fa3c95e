package postgres

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store/storetest"
)

// TestEnqueuedWakesListenersOfItsSchemaOnly: an enqueue by another store
// (another process) wakes a listener on the same schema; one in another
// schema of the same database does not; a batch that inserted nothing
// (a replay) does not either.
func TestEnqueuedWakesListenersOfItsSchemaOnly(t *testing.T) {
	t.Parallel()
	base := testURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	schema, other := freshSchema(t, base), freshSchema(t, base)
	open := func(schema string) *Store {
		s, err := Open(ctx, base, Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	listener, sender, stranger := open(schema), open(schema), open(other)
	wake, err := listener.Enqueued(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.MessageEnqueue(ctx, ptr(storetest.Params("elsewhere"))); err != nil {
		t.Fatal(err)
	}
	if _, err := sender.MessageEnqueue(ctx, ptr(storetest.Params("k1"))); err != nil {
		t.Fatal(err)
	}
	waitWake(t, wake, "after an enqueue in the schema")
	// The other schema's notification went out before ours, so had it
	// not been ignored it would have been pending with ours: one wake-up
	// was owed, and no second may follow.
	if _, err := sender.MessageEnqueue(ctx, ptr(storetest.Params("k1"))); err != nil { // a replay inserts nothing
		t.Fatal(err)
	}
	noWake(t, wake, "after another schema's enqueue and a replay")
}

// TestEnqueuedSurvivesALostConnection kills the listening backend: the
// listener reconnects (signalling once, as rows may have come meanwhile)
// and then wakes for enqueues again.
func TestEnqueuedSurvivesALostConnection(t *testing.T) {
	t.Parallel()
	base := testURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	schema := freshSchema(t, base)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	app := "msgq_listen_" + schema
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s, err := Open(ctx, u.String(), Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wake, err := s.Enqueued(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed int
	// The listening backend only: the pool's are the drains' business
	// (they retry a failed claim or outcome write).
	if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "+
		"WHERE application_name = $1 AND query = 'LISTEN "+notifyChannel+"'", app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no backend of the listener was found to terminate")
	}
	waitWake(t, wake, "after the listener's connection was lost and re-opened")
	if _, err := s.MessageEnqueue(ctx, ptr(storetest.Params("k1"))); err != nil {
		t.Fatal(err)
	}
	waitWake(t, wake, "after an enqueue on the re-opened connection")
}

func ptr[T any](v T) *T { return &v }

func waitWake(t *testing.T, wake <-chan struct{}, when string) {
	t.Helper()
	select {
	case <-wake:
	case <-time.After(30 * time.Second):
		t.Fatalf("no wake-up %s", when)
	}
}

// noWake checks that no wake-up arrives for a while: a notification is
// delivered within milliseconds on loopback, so a wrong one shows.
func noWake(t *testing.T, wake <-chan struct{}, when string) {
	t.Helper()
	select {
	case <-wake:
		t.Fatalf("woken %s", when)
	case <-time.After(500 * time.Millisecond):
	}
}
