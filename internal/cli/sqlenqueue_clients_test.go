package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
)

// TestSQLEnqueueDocsSnippet runs the Python code of docs/sql-enqueue.md's
// "From other languages", read from the document itself, so the
// documentation is what works: its function, ship_order, is called as
// written (its schema, order id and literals substituted for each case)
// with psycopg2 against a store `msgq migrate` made, with an `orders`
// table of the test's own. A commit leaves the message; a replay is its
// id; a conflict is MQ409 with the id as DETAIL (and the snippet's own
// handling of it prints it); a failed COMMIT leaves nothing; bad input is
// MQ422 with its COLUMN. .ci/run installs psycopg2; without it the test
// skips, and fails under CI=true.
func TestSQLEnqueueDocsSnippet(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "sql-enqueue.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippet := docSnippet(t, string(doc), "python")
	python := "/usr/bin/python3" // Debian's, the one python3-psycopg2 is for
	needTool(t, python, "apt-get install -y python3-psycopg2")
	if err := exec.Command(python, "-c", "import psycopg2").Run(); err != nil {
		missingTool(t, fmt.Sprintf("Python's psycopg2 is needed (apt-get install -y python3-psycopg2; .ci/run installs it): %v", err))
	}
	testSnippet(t, func(t *testing.T, dir, base, schema string, cases []snippetCase) (string, string) {
		var b strings.Builder
		b.WriteString("import json, sys\nimport psycopg2\n\n")
		for i, c := range cases {
			s := snippet
			for _, r := range [][2]string{
				{"def ship_order(", fmt.Sprintf("def ship_order_%d(", i)},
				{"msgq.enqueue(", schema + ".enqueue("},
				{"(1001,)", fmt.Sprintf("(%d,)", c.order)},
				{`"order-1001-shipped"`, `"` + c.key + `"`},
				{`"+15551234567"`, `"` + c.to + `"`},
				{`"Your order 1001 shipped"`, `"` + c.text + `"`},
			} {
				s = replaceIn(t, s, r[0], r[1])
			}
			b.WriteString(s + "\n")
		}
		b.WriteString("conn = psycopg2.connect(sys.argv[1], options='-c search_path=' + sys.argv[2])\n")
		fmt.Fprintf(&b, "for ship_order in [%s]:\n", func() string {
			var names []string
			for i := range cases {
				names = append(names, fmt.Sprintf("ship_order_%d", i))
			}
			return strings.Join(names, ", ")
		}())
		b.WriteString(`    try:
        print(json.dumps({"id": ship_order(conn)}))
    except psycopg2.Error as e:
        print(json.dumps({"error": {"code": e.pgcode, "detail": e.diag.message_detail,
                                    "column": e.diag.column_name, "message": e.diag.message_primary}}))
conn.close()
`)
		file := filepath.Join(dir, "client.py")
		writeFile(t, file, b.String())
		return runClient(t, exec.Command(python, file, base, schema))
	})
}

// snippetCase is one call of a docs snippet's shipOrder, with these in
// place of the document's order id, key, number and text.
type snippetCase struct {
	order         int
	key, to, text string
}

// testSnippet makes a store and an orders table in a schema of the test's
// own, has run call shipOrder once for each case (in order, one client
// process, one JSON line per case on its stdout), and checks the answers.
func testSnippet(t *testing.T, run func(t *testing.T, dir, base, schema string, cases []snippetCase) (stdout, stderr string)) {
	ctx := context.Background()
	dir := t.TempDir()
	base := postgresURL(t)
	storeURL, schema := pgStore(t, "msgq_snip")
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, "default_identity: shop\nidentities:\n  shop: {provider: sim}\n")
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + storeURL}}
	e.run("migrate")
	st, err := postgres.Open(ctx, base, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	// Deferred: a second order 1001 fails at COMMIT, after the enqueue.
	if _, err := conn.Exec(ctx, "CREATE TABLE "+orders+" (id int UNIQUE DEFERRABLE INITIALLY DEFERRED)"); err != nil {
		t.Fatal(err)
	}

	const key, to, text = "order-1001-shipped", "+15551234567", "Your order 1001 shipped"
	cases := []snippetCase{
		{1001, key, to, text},                            // committed
		{1002, key, to, text},                            // a replay
		{1003, key, to, "Your order 1001 was cancelled"}, // the key taken
		{1001, "order-1001-rolled-back", to, text},       // COMMIT fails: all rolled back
		{1004, "order 1004 shipped", to, text},           // bad input
	}
	stdout, stderr := run(t, dir, base, schema, cases)
	type clientErr struct{ Code, Detail, Column, Message string }
	var res []struct {
		ID    string
		Error *clientErr
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r struct {
			ID    string
			Error *clientErr
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("client printed %q: %v (stderr %s)", line, err, stderr)
		}
		res = append(res, r)
	}
	if len(res) != len(cases) {
		t.Fatalf("client printed %d answers, want %d: %s (stderr %s)", len(res), len(cases), stdout, stderr)
	}
	id := res[0].ID
	if res[0].Error != nil || len(id) != 26 {
		t.Fatalf("commit: %s (stderr %s)", stdout, stderr)
	}
	m, err := st.MessageGet(ctx, store.DefaultTenant, key)
	if err != nil {
		t.Fatalf("committed message %s: %v", key, err)
	}
	if m.ID != id || m.To != to || m.Payload == nil || m.Payload.Text != text || m.Identity != "shop" {
		t.Fatalf("committed message %+v (payload %+v); want id %s to %s text %q", m, m.Payload, id, to, text)
	}
	if res[1].Error != nil || res[1].ID != id {
		t.Fatalf("replay: %+v %+v; want id %s", res[1], res[1].Error, id)
	}
	if c := res[2].Error; c == nil || c.Code != "MQ409" || c.Detail != id || c.Column != "key" ||
		!strings.Contains(c.Message, "msgq: key "+key+" of tenant default is taken by message "+id) {
		t.Fatalf("conflict: %+v; want MQ409 with DETAIL %s and COLUMN key", c, id)
	}
	// The snippet's own handling of MQ409.
	if !strings.Contains(stderr, "key taken by message "+id) {
		t.Fatalf("the snippet did not print the existing id on MQ409; stderr %q", stderr)
	}
	if c := res[3].Error; c == nil || c.Code != "23505" {
		t.Fatalf("a COMMIT refused by a deferred constraint: %+v; want 23505", c)
	}
	if _, err := st.MessageGet(ctx, store.DefaultTenant, cases[3].key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rolled-back enqueue left %s: %v", cases[3].key, err)
	}
	if c := res[4].Error; c == nil || c.Code != "MQ422" || c.Column != "key" ||
		!strings.Contains(c.Message, `msgq: key "order 1004 shipped" must be`) {
		t.Fatalf("bad key: %+v; want MQ422 with COLUMN key", c)
	}
	var ids []int32
	if err := conn.QueryRow(ctx, "SELECT array_agg(id ORDER BY id) FROM "+orders).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[1001 1002]" {
		t.Fatalf("orders %v; want [1001 1002] (the failed transactions rolled back)", ids)
	}
}

// docSnippet is the ```lang code block under the document's "From other
// languages" heading.
func docSnippet(t *testing.T, doc, lang string) string {
	t.Helper()
	_, sec, ok := strings.Cut(doc, "\n## From other languages\n")
	if !ok {
		t.Fatal(`docs/sql-enqueue.md has no "## From other languages"`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	_, block, ok := strings.Cut(sec, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/sql-enqueue.md's From other languages has no ```%s block", lang)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatalf("docs/sql-enqueue.md's ```%s block does not end", lang)
	}
	return block + "\n"
}

// replaceIn replaces old in a docs snippet, which must have it.
func replaceIn(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("the docs snippet no longer has %s:\n%s", old, s)
	}
	return strings.ReplaceAll(s, old, new)
}

// needTool is bin's path, or a skip naming install (a failure in CI).
func needTool(t *testing.T, bin, install string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		missingTool(t, fmt.Sprintf("%s is needed (%s; .ci/run installs it): %v", bin, install, err))
	}
	return p
}

func missingTool(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// runClient runs c, failing the test unless it exits 0.
func runClient(t *testing.T, c *exec.Cmd) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout %s\nstderr %s", c.Args[0], err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}
