package cli_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMigrateRecordsQuietHours: msgq migrate records each identity's
// quiet policy with its channels (docs/sql-enqueue.md), for enqueue() to
// apply as msgq send does; running it again after a change records that.
func TestMigrateRecordsQuietHours(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	storeURL, schema := pgStore(t, "msgq_sqlquiet")
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, "default_identity: shop\nidentities:\n"+
		"  shop: {provider: sim, quiet_hours: '21:00-24:00', quiet_zone: Europe/Berlin, quiet_exempt: {lanes: [reply], purposes: [otp, alert]}}\n"+
		"  texts: {provider: sim, channel: sms}\n")
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + storeURL}}
	e.run("migrate")
	conn, err := pgx.Connect(ctx, postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	type rec struct {
		Window, Zone    *string
		Lanes, Purposes []string
	}
	read := func(name string) rec {
		t.Helper()
		var r rec
		if err := conn.QueryRow(ctx, "SELECT quiet_window, quiet_zone, quiet_exempt_lanes, quiet_exempt_purposes FROM "+
			pgx.Identifier{schema, "sql_identities"}.Sanitize()+" WHERE name = $1", name).Scan(&r.Window, &r.Zone, &r.Lanes, &r.Purposes); err != nil {
			t.Fatal(err)
		}
		return r
	}
	w, z := "21:00-00:00", "Europe/Berlin"
	if got := read("shop"); !reflect.DeepEqual(got, rec{&w, &z, []string{"reply"}, []string{"otp", "alert"}}) {
		t.Errorf("shop recorded %+v", got)
	}
	if got := read("texts"); got.Window != nil || got.Zone != nil || len(got.Lanes)+len(got.Purposes) != 0 {
		t.Errorf("texts (no quiet hours) recorded %+v", got)
	}
	writeFile(t, cfg, "default_identity: shop\nidentities:\n  shop: {provider: sim}\n  texts: {provider: sim, channel: sms}\n")
	e.run("migrate")
	if got := read("shop"); got.Window != nil || got.Zone != nil || len(got.Lanes)+len(got.Purposes) != 0 {
		t.Errorf("shop after its quiet hours were removed: %+v", got)
	}
}
