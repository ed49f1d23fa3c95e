package cli_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
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
