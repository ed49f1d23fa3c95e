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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
)

// TestSQLEnqueueFromPsqlAndPython: an application enqueues with msgq's
// SQL function (docs/sql-enqueue.md) from psql, the real client binary,
// and from Python (psycopg2, .ci/run installs it), inside its own
// transactions: committed sends are noticed and sent by a running
// `drain --follow`; rolled-back ones never exist; a replay is the same id;
// a conflict and bad input raise their documented SQLSTATEs.
func TestSQLEnqueueFromPsqlAndPython(t *testing.T) {
	t.Parallel()
	// Debian's python3, the one Debian's python3-psycopg2 is for (a
	// python3 earlier in PATH, such as pyenv's, may lack it).
	python := "/usr/bin/python3"
	// PostgreSQL first: without it the test skips outside CI, whatever
	// clients are installed.
	base := postgresURL(t)
	needTool(t, "psql", "apt-get install -y postgresql-client")
	needTool(t, python, "apt-get install -y python3-psycopg2")
	if err := exec.Command(python, "-c", "import psycopg2").Run(); err != nil {
		missingTool(t, fmt.Sprintf("Python's psycopg2 is needed (apt-get install -y python3-psycopg2; .ci/run installs it): %v", err))
	}
	ctx := context.Background()
	dir := t.TempDir()
	storeURL, schema := pgStore(t, "msgq_sql")
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, "default_identity: shop\nidentities:\n  shop: {provider: sim}\n  texts: {provider: sim, channel: sms, max_segments: 1}\n")
	e := &opEnv{msgqEnv: &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + storeURL}}}
	e.run("migrate")
	st, err := postgres.Open(ctx, base, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	startDrain(t, e.msgqEnv, "--follow")

	// psql: commit one, roll one back, replay, conflict.
	psql := func(script string) (string, string, int) {
		c := exec.Command("psql", base, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose")
		c.Stdin = strings.NewReader(script)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out.String()), errb.String(), code
	}
	q := pgx.Identifier{schema}.Sanitize()
	id, errs, code := psql(`BEGIN;
CREATE TEMP TABLE orders (id int);
INSERT INTO orders VALUES (1001);
SELECT ` + q + `.enqueue(key => 'psql-1001', to_addr => '+1 (555) 123-4567', template => 'order_update', params => ARRAY['Ada', '1001']);
COMMIT;
`)
	if code != 0 || len(id) != 26 {
		t.Fatalf("psql enqueue: %q, exit %d: %s", id, code, errs)
	}
	gone, errs, code := psql(`BEGIN;
SELECT ` + q + `.enqueue(key => 'psql-rolled-back', to_addr => '+15551234567', text => 'never sent');
ROLLBACK;
`)
	if code != 0 || len(gone) != 26 {
		t.Fatalf("psql enqueue then rollback: %q, exit %d: %s", gone, code, errs)
	}
	again, errs, code := psql(`SELECT ` + q + `.enqueue(key => 'psql-1001', to_addr => '+1 (555) 123-4567', template => 'order_update', params => ARRAY['Ada', '1001']);`)
	if code != 0 || again != id {
		t.Fatalf("psql replay: %q, exit %d: %s; want %s", again, code, errs, id)
	}
	_, errs, code = psql(`SELECT ` + q + `.enqueue(key => 'psql-1001', to_addr => '+15551234567', text => 'other content');`)
	if code != 3 || !strings.Contains(errs, "ERROR:  MQ409: msgq: key psql-1001 of tenant default is taken by message "+id) ||
		!strings.Contains(errs, "DETAIL:  "+id+"\n") {
		t.Fatalf("psql conflict: exit %d, stderr %q; want SQLSTATE MQ409 with DETAIL %s", code, errs, id)
	}
	_, errs, code = psql(`SELECT ` + q + `.enqueue(key => 'psql bad', to_addr => '+15551234567', text => 'hi');`)
	if code != 3 || !strings.Contains(errs, "ERROR:  MQ422: msgq: key \"psql bad\" must be 1 to 64 characters") {
		t.Fatalf("psql bad key: exit %d, stderr %q; want SQLSTATE MQ422 naming key", code, errs)
	}
	// What needs the admission is taken in, and the drain fails it with
	// msgq send's error: a number too short; a second SMS segment where
	// the config allows one (texts' max_segments).
	badNumber, errs, code := psql(`SELECT ` + q + `.enqueue(key => 'psql-bad', to_addr => '+1555', text => 'hi');`)
	if code != 0 || len(badNumber) != 26 {
		t.Fatalf("psql bad number: %q, exit %d: %s; want it taken in", badNumber, code, errs)
	}
	long, errs, code := psql(`SELECT ` + q + `.enqueue(key => 'psql-long', identity => 'texts', to_addr => '+15551234567', text => repeat('a', 161));`)
	if code != 0 || len(long) != 26 {
		t.Fatalf("psql text over max_segments: %q, exit %d: %s; want it taken in", long, code, errs)
	}

	// Python.
	c := exec.Command(python, filepath.Join("testdata", "sqlenqueue", "client.py"), base, schema)
	c.Stderr = os.Stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("python client: %v", err)
	}
	type pyErr struct{ SQLState, Detail, Column, Message string }
	var py struct {
		ID           string `json:"id"`
		RolledBackID string `json:"rolled_back_id"`
		ReplayID     string `json:"replay_id"`
		BadNumberID  string `json:"bad_number_id"`
		Conflict     pyErr  `json:"conflict"`
		Reformatted  pyErr  `json:"reformatted"`
		Invalid      pyErr  `json:"invalid"`
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatalf("python client printed %q: %v", out, err)
	}
	if len(py.ID) != 26 || py.ReplayID != py.ID || len(py.RolledBackID) != 26 {
		t.Fatalf("python: %+v", py)
	}
	if py.Conflict.SQLState != "MQ409" || py.Conflict.Detail != py.ID || py.Conflict.Column != "key" {
		t.Fatalf("python conflict: %+v; want MQ409 with DETAIL %s", py.Conflict, py.ID)
	}
	if py.Reformatted.SQLState != "MQ409" || py.Reformatted.Detail != py.ID {
		t.Fatalf("python, the same send with its number written another way: %+v; want MQ409 with DETAIL %s (a replay is the same call)", py.Reformatted, py.ID)
	}
	if py.Invalid.SQLState != "MQ422" || py.Invalid.Column != "key" {
		t.Fatalf("python bad key: %+v; want MQ422 naming key", py.Invalid)
	}

	// The drain, following, notices the commits and sends them.
	for end := time.Now().Add(2 * time.Minute); ; {
		a, b := e.get(id), e.get(py.ID)
		if a.State == state.Sent && b.State == state.Sent {
			if a.Identity != "shop" || a.To != "+15551234567" || b.To != "+15551234599" {
				t.Fatalf("sent %+v and %+v", a, b)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("drain --follow did not send them: %s %s, %s %s", a.Key, a.State, b.Key, b.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct{ id, why string }{
		{badNumber, `to: invalid phone number "+1555"`},
		{long, "text: is 2 SMS segments (GSM-7, 161 characters); identity texts allows at most 1 (max_segments)"},
		{py.BadNumberID, `to: invalid phone number "12"`},
	} {
		// Each is admitted at the wake-up its own commit sent.
		m := e.get(c.id)
		for end := time.Now().Add(time.Minute); m.State == state.Intake && time.Now().Before(end); m = e.get(c.id) {
			time.Sleep(20 * time.Millisecond)
		}
		if m.State != state.Failed || m.Reason != state.Invalid || !strings.HasPrefix(m.LastError, c.why) {
			t.Fatalf("%s: %s(%s) %q; want failed(invalid) %q", m.Key, m.State, m.Reason, m.LastError, c.why)
		}
	}
	for _, ref := range []string{gone, "psql-rolled-back", py.RolledBackID, "py-rolled-back"} {
		if _, err := st.MessageGet(ctx, store.DefaultTenant, ref); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a rolled-back enqueue left %s: %v", ref, err)
		}
	}
}
