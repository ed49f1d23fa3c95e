package drain_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/queue"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
)

// sqlApp is an application's connection calling the store's enqueue().
func sqlApp(t *testing.T, s *postgres.Store, schema string) func(key, to string) string {
	t.Helper()
	ctx := context.Background()
	if err := s.SQLIdentitiesRecord(ctx, []store.SQLIdentity{{Name: "sim", Default: true}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, os.Getenv("MSGQ_TEST_POSTGRES_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return func(key, to string) string {
		t.Helper()
		var id string
		if err := conn.QueryRow(ctx, "SELECT "+pgx.Identifier{schema}.Sanitize()+".enqueue(key => $1, to_addr => $2, text => 'hi')", key, to).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
}

func admission(t *testing.T, s *postgres.Store) func(context.Context) (store.IntakeResult, error) {
	t.Helper()
	ids, err := identities.Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	return (&queue.Admission{Store: s, Defaults: queue.Defaults{Identities: ids}}).Run
}

// TestACronDrainAdmitsRowsTakenInBySQL: rows an application's enqueue()
// took in are admitted by the drain's run and sent by the same run; one
// the admission refuses fails as invalid, unsent.
func TestACronDrainAdmitsRowsTakenInBySQL(t *testing.T) {
	t.Parallel()
	s, _, schema := postgresSchema(t)
	enqueue := sqlApp(t, s, schema)
	a, b := enqueue("sql-a", "+15551234567"), enqueue("sql-b", "+1 (555) 123-4568")
	bad := enqueue("sql-bad", "+1555")
	cfg := config(s, sim.New(sim.DefaultConfig()).Provider())
	cfg.Admit = admission(t, s)
	sum, err := drain.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Admitted != 2 || sum.Invalid != 1 || sum.Sent != 2 {
		t.Fatalf("one run: %+v; want 2 admitted and sent, 1 invalid", sum)
	}
	for id, want := range map[string]state.State{a: state.Sent, b: state.Sent, bad: state.Failed} {
		m, err := s.MessageGet(context.Background(), "", id)
		if err != nil || m.State != want {
			t.Fatalf("%s: %+v, %v; want %s", id, m, err, want)
		}
	}
}

// TestAFollowingDrainAdmitsAtTheCommitsWakeUp: an idle drain --follow
// whose poll is an hour admits and sends a row enqueue() took in at once:
// the NOTIFY at the application's commit wakes it.
func TestAFollowingDrainAdmitsAtTheCommitsWakeUp(t *testing.T) {
	t.Parallel()
	s, _, schema := postgresSchema(t)
	enqueue := sqlApp(t, s, schema)
	w := &claimWatch{Store: s, empty: make(chan struct{})}
	cfg := config(w, sim.New(sim.DefaultConfig()).Provider())
	cfg.Follow, cfg.IdlePoll = true, time.Hour
	cfg.Admit = admission(t, s)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan drain.Summary, 1)
	go func() {
		sum, err := drain.Run(ctx, cfg)
		if err != nil {
			t.Error(err)
		}
		done <- sum
	}()
	select {
	case <-w.empty:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain never claimed")
	}
	id := enqueue("sql-late", "+15551234567")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, err := s.MessageGet(context.Background(), "", id)
		if err != nil {
			t.Fatal(err)
		}
		if m.State == state.Sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the row taken in is %s after 30s; want it admitted and sent at the wake-up", m.State)
		}
	}
	stop()
	if sum := <-done; sum.Admitted != 1 || sum.Sent != 1 {
		t.Fatalf("summary %+v; want 1 admitted and sent", sum)
	}
}
