package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// postgresURL is the test server's URL, or a skip (a failure in CI: the
// PostgreSQL tests must never skip silently there).
func postgresURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_POSTGRES_URL is not set: PostgreSQL tests must not skip in CI")
		}
		t.Skip("MSGQ_TEST_POSTGRES_URL is not set")
	}
	return u
}

// TestTheCLIOnPostgreSQL runs the quick start against a PostgreSQL store
// in a schema of its own: send, replay, conflict (exit 3), drain, show.
func TestTheCLIOnPostgreSQL(t *testing.T) {
	t.Parallel()
	base := postgresURL(t)
	schema := fmt.Sprintf("msgq_cli_%d", rand.Uint64())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		conn.Close(context.Background())
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	e := &msgqEnv{t: t, env: []string{"MSGQ_STORE=" + u.String(), "XDG_CONFIG_HOME=" + t.TempDir()}}
	send := []string{"send", "--key", "order-1001-shipped", "--to", "+15551234567", "--template", "order_update", "--param", "Ada", "-o", "json"}
	var first, again sendOut
	if err := json.Unmarshal([]byte(e.run(send...)), &first); err != nil || first.Replayed {
		t.Fatalf("first send: %+v %v", first, err)
	}
	if err := json.Unmarshal([]byte(e.run(send...)), &again); err != nil || !again.Replayed || again.ID != first.ID {
		t.Fatalf("replay: %+v %v", again, err)
	}
	conflict := e.cmd("send", "--key", "order-1001-shipped", "--to", "+15551234567", "--text", "different")
	if err := conflict.Run(); conflict.ProcessState.ExitCode() != 3 {
		t.Errorf("conflict: exit %d (%v), want 3", conflict.ProcessState.ExitCode(), err)
	}
	e.run("drain")
	var shown struct {
		State    string
		Attempts []struct{ Class string }
	}
	if err := json.Unmarshal([]byte(e.run("show", "order-1001-shipped", "-o", "json")), &shown); err != nil ||
		shown.State != "sent" || len(shown.Attempts) != 1 || shown.Attempts[0].Class != "accepted" {
		t.Errorf("after drain: %+v %v", shown, err)
	}
}
