package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/sqlite"
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

// pgbouncerURL is a transaction-mode pgbouncer in front of postgresURL's
// server (MSGQ_TEST_PGBOUNCER_URL), or a skip (a failure in CI).
func pgbouncerURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("MSGQ_TEST_PGBOUNCER_URL")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_PGBOUNCER_URL is not set: the tests through a pooler must not skip in CI")
		}
		t.Skip("MSGQ_TEST_PGBOUNCER_URL is not set")
	}
	return u
}

// withParam returns the URL raw with the query parameter key set to val.
func withParam(t testing.TB, raw, key, val string) string {
	t.Helper()
	u, err := urlWith(raw, key, val)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func urlWith(raw, key, val string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set(key, val)
	// Spaces as %20: libpq and pgx read a + in a URL as a +.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String(), nil
}

// newSchema creates a schema of its own (named prefix_RANDOM) on the
// server at base, and returns its name and a function that drops it. It
// serves tests and testscript's Setup, which has no *testing.T.
func newSchema(base, prefix string) (schema string, drop func(), err error) {
	schema = fmt.Sprintf("%s_%d", prefix, rand.Uint64())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, err
	}
	return schema, func() {
		// A fresh connection: the test's may be gone, and every drain in
		// the schema has exited by now.
		if c, err := pgx.Connect(context.Background(), base); err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	}, nil
}

// pgStore gives the test a schema of its own and returns a store URL that
// reaches it the way a user would write it (search_path in the URL), and
// the schema's name. The schema is dropped when the test ends.
func pgStore(t *testing.T, prefix string) (storeURL, schema string) {
	t.Helper()
	base := postgresURL(t)
	schema, drop, err := newSchema(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	return withParam(t, base, "search_path", schema), schema
}

// backend is one kind of store for tests that run on both: the URL msgq
// is given, and a handle the test opens itself to watch the queue.
type backend struct {
	kind string // sqlite or postgres
	url  string
	open func(ctx context.Context) (store.Store, error)
}

// newBackend makes a fresh store of kind (a file in dir, or a schema of
// its own). The PostgreSQL kind skips (fails in CI) without a server.
func newBackend(t *testing.T, kind, dir string) *backend {
	t.Helper()
	switch kind {
	case "sqlite":
		path := filepath.Join(dir, "q.db")
		return &backend{kind: kind, url: "sqlite:" + path, open: func(ctx context.Context) (store.Store, error) {
			return sqlite.Open(ctx, path, sqlite.Options{})
		}}
	case "postgres":
		base := postgresURL(t)
		u, schema := pgStore(t, "msgq_cli")
		return &backend{kind: kind, url: u, open: func(ctx context.Context) (store.Store, error) {
			return postgres.Open(ctx, base, postgres.Options{Schema: schema})
		}}
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// watch opens b for the test's own reads, closed when the test ends.
func (b *backend) watch(t *testing.T) store.Store {
	t.Helper()
	st, err := b.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// queueCounts sums the store's queued, sending and unknown rows over every
// identity.
func queueCounts(t *testing.T, st store.Store) (queued, sending, unknown int) {
	t.Helper()
	ids, err := st.IdentityStates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		queued, sending, unknown = queued+id.Queued, sending+id.Sending, unknown+id.Unknown
	}
	return queued, sending, unknown
}

// TestTheCLIOnPostgreSQL runs the quick start against a PostgreSQL store
// in a schema of its own: send, replay, conflict (exit 3), drain, show.
func TestTheCLIOnPostgreSQL(t *testing.T) {
	t.Parallel()
	storeURL, _ := pgStore(t, "msgq_cli")
	e := &msgqEnv{t: t, env: []string{"MSGQ_STORE=" + storeURL, "XDG_CONFIG_HOME=" + t.TempDir()}}
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
