//go:build full

package cli_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPacingSlotsCountFromWhenTheClaimRan holds the identity's pacing row
// locked (as a long claim of another drain would) while `msgq drain`
// claims two messages to one recipient, then lets it go. The claim waited;
// the slots it hands out must still be counted from when it ran: slots
// counted from a clock read before the wait lie in the past, the drain
// calls at once, and the recipient gets both messages together. (Found by
// eight drains on two cores, where claims queue on this lock for seconds.)
func TestPacingSlotsCountFromWhenTheClaimRan(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	base := serveSim(t)
	storeURL, _ := pgStore(t, "msgq_pace")
	app := fmt.Sprintf("msgq_pace_%d", rand.Uint32())
	dir := t.TempDir()
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, fmt.Sprintf(`default_identity: shop
identities:
  shop:
    provider: whatsapp
    base_url: %s
    phone_number_id: "1000001"
    token_env: MSGQ_TEST_TOKEN
    per_recipient_interval: %s
    pacing_headroom: 0.25
`, base, interval))
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + withParam(t, storeURL, "application_name", app),
		"MSGQ_TEST_TOKEN=test-token"}}
	e.run("send", "--key", "first", "--to", "+15551234567", "--text", "one")
	e.run("send", "--key", "second", "--to", "+15551234567", "--text", "two")

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, withParam(t, storeURL, "application_name", "msgq_test_holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The claim creates this row the first time; create it here so that it
	// can be held.
	if _, err := conn.Exec(ctx, "INSERT INTO identity_pace (identity, next_at) VALUES ('shop', 'epoch') ON CONFLICT DO NOTHING"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM identity_pace WHERE identity = 'shop' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	d := startDrain(t, e, "--follow")
	// Wait until the drain's claim waits for the lock, then hold it a
	// while longer: the claim's clock reading, if taken before the wait,
	// gets old. (Watched from another connection: pg_stat_activity is a
	// snapshot for the length of a transaction.)
	watch, err := pgx.Connect(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	waiting := func() bool {
		var n int
		if err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !waiting(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the drain never waited for the pacing lock: %s", d.stderr.String())
		}
	}
	time.Sleep(3 * time.Second)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	var ds []delivery
	for deadline := time.Now().Add(30 * time.Second); len(ds) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries after 30s: %s", len(ds), d.stderr.String())
		}
		ds = deliveries(t, base)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("drain after SIGTERM: %v: %s", err, d.stderr.String())
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].At.Before(ds[j].At) })
	if gap := ds[1].At.Sub(ds[0].At); gap < interval {
		t.Errorf("the recipient got two messages %s apart (interval %s): the claim that waited for the lock counted slots from before its wait", gap, interval)
	}
}
