package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store/postgres"
)

// TestMigrateRecordsIdentityNames: msgq migrate records the config's
// identity names, and its default, for enqueue() to accept
// (docs/sql-enqueue.md): names only (what an identity sends on and its
// limits are the config's, read by the admission). A later config's
// default replaces the recorded one; a name another host's config
// recorded stays.
func TestMigrateRecordsIdentityNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	storeURL, schema := pgStore(t, "msgq_sqlids")
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, "default_identity: shop\nidentities:\n  shop: {provider: sim, quiet_hours: '21:00-08:00', quiet_zone: Europe/Berlin}\n  texts: {provider: sim, channel: sms}\n")
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + storeURL}}
	e.run("migrate")
	conn, err := pgx.Connect(ctx, postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	read := func() (names []string, def string, cols []string) {
		t.Helper()
		table := pgx.Identifier{schema, "sql_identities"}.Sanitize()
		if err := conn.QueryRow(ctx, "SELECT array_agg(name ORDER BY name), coalesce(max(name) FILTER (WHERE is_default), '') FROM "+table).Scan(&names, &def); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT array_agg(column_name::text ORDER BY column_name) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'sql_identities'", schema).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		return names, def, cols
	}
	names, def, cols := read()
	if !reflect.DeepEqual(names, []string{"shop", "sim", "texts"}) || def != "shop" || !reflect.DeepEqual(cols, []string{"is_default", "name", "updated_at"}) {
		t.Fatalf("recorded %v (default %q), columns %v", names, def, cols)
	}
	writeFile(t, cfg, "default_identity: texts\nidentities:\n  texts: {provider: sim, channel: sms}\n")
	e.run("migrate")
	if names, def, _ = read(); !reflect.DeepEqual(names, []string{"shop", "sim", "texts"}) || def != "texts" {
		t.Fatalf("after a config with another default: %v (default %q)", names, def)
	}
}

// TestServeAdmitsRowsTakenInBySQL: a queue an application feeds through
// enqueue() and that msgq serve serves needs no drain running for its
// rows to be checked: serve, woken by the NOTIFY at the application's
// commit, queues a valid one as msgq send would and fails an invalid one
// with msgq send's error.
func TestServeAdmitsRowsTakenInBySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	storeURL, schema := pgStore(t, "msgq_sqlserve")
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, "default_identity: shop\nregion: US\nidentities:\n  shop: {provider: sim}\n")
	e := &opEnv{msgqEnv: &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + storeURL}}}
	e.run("migrate")
	st, err := postgres.Open(ctx, postgresURL(t), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	startListener(t, e.msgqEnv, "serve: listening on ", "serve", "--addr", "127.0.0.1:0")
	conn, err := pgx.Connect(ctx, postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	enqueue := func(key, to string) string {
		var id string
		if err := conn.QueryRow(ctx, "SELECT "+pgx.Identifier{schema}.Sanitize()+".enqueue(key => $1, to_addr => $2, text => 'hi')", key, to).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// Another host's config defines "elsewhere" (its msgq migrate recorded
	// the name): this one leaves its rows in intake.
	if _, err := conn.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "sql_identities"}.Sanitize()+" (name, updated_at) VALUES ('elsewhere', now())"); err != nil {
		t.Fatal(err)
	}
	var waiting string
	if err := conn.QueryRow(ctx, "SELECT "+pgx.Identifier{schema}.Sanitize()+".enqueue(key => 'sql-elsewhere', identity => 'elsewhere', to_addr => '+15551234567', text => 'hi')").Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	good, bad := enqueue("sql-good", "(555) 123-4567"), enqueue("sql-bad", "+1555")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		g, b := e.get(good), e.get(bad)
		if g.State != state.Intake && b.State != state.Intake {
			if g.State != state.Queued || g.To != "+15551234567" || b.State != state.Failed || b.Reason != state.Invalid ||
				!strings.HasPrefix(b.LastError, `to: invalid phone number "+1555"`) {
				t.Fatalf("serve admitted %s %s %s and %s %s(%s) %q", g.Key, g.State, g.To, b.Key, b.State, b.Reason, b.LastError)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve left %s %s and %s %s for 30s", g.Key, g.State, b.Key, b.State)
		}
	}
	// The row no config here defines waits in intake, listed, and a
	// person may cancel it (nothing of it went out); resend refuses it.
	if m := e.get(waiting); m.State != state.Intake {
		t.Fatalf("another host's row: %s; want it left in intake", m.State)
	}
	var listed []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(e.run("list", "--state", "intake", "-o", "json")), &listed); err != nil || len(listed) != 1 || listed[0].ID != waiting {
		t.Fatalf("list --state intake: %+v, %v; want %s", listed, err, waiting)
	}
	e.run("cancel", "sql-elsewhere", "--by", "test")
	if m := e.get(waiting); m.State != state.Failed || m.Reason != state.Canceled {
		t.Fatalf("after cancel: %s(%s); want failed(canceled)", m.State, m.Reason)
	}
	e.refused(1, `never admitted`, "resend", "sql-bad", "--key", "sql-bad-2")
}
