package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgEnv is a clean environment for msgq against PostgreSQL: the PG*
// variables of whoever runs the tests are left out, so that each case
// sets exactly the ones it means.
func pgEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "MSGQ_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "XDG_CONFIG_HOME="+t.TempDir()), extra...)
}

// runMsgq runs msgq with env and returns its output and exit code, killing
// it after a minute (a connection that hangs must fail the test, not hang
// it).
func runMsgq(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "msgq", args...)
	c.Env = env
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("msgq %s did not finish in a minute: %s", strings.Join(args, " "), errb.String())
	}
	return out.String(), errb.String(), code
}

// appListening says whether a connection named app is open on the server
// and has sent LISTEN: a drain --follow on PostgreSQL does that once it
// drains (a connection alone may be the store still opening).
func appListening(t *testing.T, conn *pgx.Conn, app string) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// followUntilConnected starts `msgq drain --follow` with env, waits until
// the server shows it listening on a connection named app, and stops the
// drain (exit 0).
func followUntilConnected(t *testing.T, conn *pgx.Conn, env []string, app string) {
	t.Helper()
	d := exec.Command("msgq", "drain", "--follow")
	d.Env = env
	var errb syncBuffer
	d.Stderr = &errb
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Process.Kill(); _ = d.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !appListening(t, conn, app); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %s after 30s: %s", app, errb.String())
		}
	}
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Errorf("drain after SIGTERM: %v: %s", err, errb.String())
	}
}

// TestPostgresURLsAndEnvironment: a PostgreSQL store is named the way
// libpq users name one. postgresql:// is the same store as postgres://;
// libpq parameters in the URL (sslmode, search_path, application_name,
// connect_timeout) reach the connection; and the PG* environment variables
// fill in what the URL leaves out, down to a bare postgres://.
func TestPostgresURLsAndEnvironment(t *testing.T) {
	t.Parallel()
	storeURL, schema := pgStore(t, "msgq_url")
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	watch, err := pgx.Connect(ctx, postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	keysIn := func(key string) int {
		var n int
		if err := watch.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "messages"}.Sanitize()+" WHERE key = $1", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	send := func(key string) []string {
		return []string{"send", "--key", key, "--to", "+15551234567", "--text", "hi", "-o", "json"}
	}

	t.Run("postgresql:// is the same store", func(t *testing.T) {
		ql := "postgresql://" + strings.TrimPrefix(storeURL, "postgres://")
		if out, errs, code := runMsgq(t, pgEnv(t, "MSGQ_STORE="+ql), send("url-ql")...); code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
		out, errs, code := runMsgq(t, pgEnv(t, "MSGQ_STORE="+storeURL), "show", "url-ql", "-o", "json")
		if code != 0 || !strings.Contains(out, `"key": "url-ql"`) {
			t.Errorf("postgres:// does not see what postgresql:// wrote: exit %d: %s%s", code, out, errs)
		}
		if n := keysIn("url-ql"); n != 1 {
			t.Errorf("%d rows in the schema search_path named", n)
		}
	})

	t.Run("application_name reaches the server", func(t *testing.T) {
		app := fmt.Sprintf("msgq_url_%d", rand.Uint32())
		followUntilConnected(t, watch, pgEnv(t, "MSGQ_STORE="+withParam(t, storeURL, "application_name", app)), app)
	})

	t.Run("connect_timeout bounds a server that never answers", func(t *testing.T) {
		// A listener that accepts and says nothing: without the timeout
		// the connection attempt would wait for ever.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		silent := viaProxy(t, withParam(t, storeURL, "connect_timeout", "1"), ln.Addr().String())
		_, errs, code := runMsgq(t, pgEnv(t, "MSGQ_STORE="+silent), "list")
		if code != 1 || !strings.Contains(errs, "timeout") {
			t.Errorf("exit %d: %s", code, errs)
		}
	})

	// The server's address, user and database, as PG* variables.
	host, port, _ := net.SplitHostPort(u.Host)
	pgVars := []string{"PGHOST=" + host, "PGPORT=" + port, "PGUSER=" + u.User.Username(),
		"PGDATABASE=" + strings.TrimPrefix(u.Path, "/"), "PGSSLMODE=" + u.Query().Get("sslmode"),
		"PGOPTIONS=-c search_path=" + schema}
	for _, bare := range []string{"postgres://", "postgres:///", "postgresql://"} {
		t.Run("PG variables complete "+bare, func(t *testing.T) {
			key := fmt.Sprintf("url-env-%d", rand.Uint32())
			app := fmt.Sprintf("msgq_env_%d", rand.Uint32())
			env := pgEnv(t, append([]string{"MSGQ_STORE=" + bare, "PGAPPNAME=" + app}, pgVars...)...)
			out, errs, code := runMsgq(t, env, send(key)...)
			var r sendOut
			if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Replayed {
				t.Fatalf("exit %d: %s%s", code, out, errs)
			}
			// PGOPTIONS' search_path chose the schema.
			if n := keysIn(key); n != 1 {
				t.Errorf("%d rows with the key in the schema PGOPTIONS named", n)
			}
			followUntilConnected(t, watch, env, app)
		})
	}

	t.Run("the URL beats the PG variables", func(t *testing.T) {
		env := pgEnv(t, "MSGQ_STORE="+storeURL, "PGHOST=127.0.0.1", "PGPORT=1", "PGDATABASE=msgq_no_such_database",
			"PGOPTIONS=-c search_path=msgq_no_such_schema")
		out, errs, code := runMsgq(t, env, send("url-wins")...)
		if code != 0 || keysIn("url-wins") != 1 {
			t.Errorf("exit %d: %s%s", code, out, errs)
		}
	})
}

// TestPostgresPasswordIsNeverPrinted runs every command that opens the
// store, with a password in the URL and debug logging, on a working store
// and on broken ones (a port with nothing listening, a database that does
// not exist, a schema that does not exist): the password (as written, or
// percent-decoded) appears in no output and no error. The local server
// trusts its clients, so the password is carried but never checked.
func TestPostgresPasswordIsNeverPrinted(t *testing.T) {
	t.Parallel()
	storeURL, _ := pgStore(t, "msgq_pw")
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	const password = "s3cret:p@ss/word"
	u.User = url.UserPassword(u.User.Username(), password)
	good := u.String()
	encoded := strings.TrimPrefix(strings.SplitN(strings.TrimPrefix(good, "postgres://"), "@", 2)[0], u.User.Username()+":")
	if encoded == password {
		t.Fatalf("the password %q needs no encoding: the test would not tell the forms apart", password)
	}
	noPort := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()
	missingDB := *u
	missingDB.Path = "/msgq_no_such_database"
	stores := map[string]string{
		"working":       good,
		"nothing there": viaProxy(t, good, noPort),
		"no database":   missingDB.String(),
		"no schema":     withParam(t, good, "search_path", "msgq_no_such_schema"),
	}
	dir := t.TempDir()
	in := dir + "/in.jsonl"
	writeFile(t, in, `{"key":"pw-file","to":"+15551234567","text":"hi"}`+"\n")
	commands := [][]string{
		{"migrate", "-o", "json"},
		{"send", "--key", "pw-1", "--to", "+15551234567", "--text", "hi"},
		{"send", "--key", "pw-1", "--to", "+15551234567", "--text", "hi", "-o", "json"},
		{"send", "--file", in},
		{"list"}, {"show", "pw-1", "-o", "json"}, {"drain", "-o", "json"},
		{"identities"}, {"stuck"}, {"stats", "-o", "json"}, {"health", "--max-unknown", "5"}, {"version", "-o", "json"},
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := pgEnv(t, "MSGQ_STORE="+st, "MSGQ_LOG_LEVEL=debug")
			cmds := commands
			if name == "nothing there" {
				// send retries for ten seconds: once shows its messages.
				cmds = [][]string{{"send", "--key", "pw-1", "--to", "+15551234567", "--text", "hi"}, {"list"}, {"migrate"}, {"drain"}}
			} else if name != "working" {
				cmds = cmds[:8]
			}
			failures := 0
			for _, args := range cmds {
				out, errs, code := runMsgq(t, env, args...)
				if code != 0 {
					failures++
					if name == "working" {
						t.Errorf("msgq %s: exit %d: %s", strings.Join(args, " "), code, errs)
					}
				}
				for _, form := range []string{password, encoded} {
					if strings.Contains(out, form) || strings.Contains(errs, form) {
						t.Errorf("msgq %s (exit %d) printed the password: %s%s", strings.Join(args, " "), code, out, errs)
					}
				}
				if code == 1 && !strings.Contains(errs, "msgq: ") {
					t.Errorf("msgq %s: exit 1 without an error line: %s", strings.Join(args, " "), errs)
				}
			}
			// The broken stores really were broken, the working one worked.
			if (name == "working") != (failures == 0) {
				t.Errorf("%d of %d commands failed", failures, len(cmds))
			}
		})
	}
}
