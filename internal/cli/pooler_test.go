package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pooledStore gives the test a schema of its own and returns the URL
// of that schema through the transaction pooler (search_path in the URL,
// as a user writes it), and a connection to the server itself, to look
// behind msgq's back.
func pooledStore(t *testing.T, prefix string) (storeURL, schema string, direct *pgx.Conn) {
	t.Helper()
	pooler := pgbouncerURL(t)
	base := postgresURL(t)
	_, schema = pgStore(t, prefix)
	ctx := context.Background()
	direct, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close(context.Background()) })
	return withParam(t, pooler, "search_path", schema), schema, direct
}

func countIn(t *testing.T, conn *pgx.Conn, schema, where string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, "messages"}.Sanitize()+" WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCommandsInARowThroughAPooler: before msgq knew of poolers, the
// second command through pgbouncer pool_mode=transaction failed with
// `prepared statement "stmtcache_..." already exists (SQLSTATE 42P05)`:
// the first command's statement cache had left its statements on the
// server connection the pooler lent the second one.
func TestCommandsInARowThroughAPooler(t *testing.T) {
	t.Parallel()
	u, schema, direct := pooledStore(t, "msgq_inarow")
	env := pgEnv(t, "MSGQ_STORE="+u)
	send := func(key string) sendOut {
		t.Helper()
		out, errs, code := runMsgq(t, env, "send", "--key", key, "--to", "+15551234567", "--text", "hi "+key, "-o", "json")
		var r sendOut
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("send %s: exit %d: %s%s", key, code, out, errs)
		}
		return r
	}
	if r := send("row-1"); r.Replayed {
		t.Errorf("the first send was a replay")
	}
	if r := send("row-2"); r.Replayed {
		t.Errorf("the second send was a replay")
	}
	if r := send("row-1"); !r.Replayed {
		t.Errorf("the same key again was not a replay")
	}
	for _, args := range [][]string{{"list", "-o", "json"}, {"show", "row-2", "-o", "json"}, {"drain"}, {"stats", "-o", "json"}, {"drain"}} {
		if out, errs, code := runMsgq(t, env, args...); code != 0 {
			t.Fatalf("msgq %s: exit %d: %s%s", strings.Join(args, " "), code, out, errs)
		}
	}
	if n := countIn(t, direct, schema, "state = 'sent'"); n != 2 {
		t.Errorf("%d rows sent in the schema search_path named, want 2", n)
	}
}

// TestDrainFollowThroughAPoolerSaysItPolls: behind a transaction pooler
// a LISTEN does not outlast its transaction, so drain --follow says once
// on stderr that it polls, and how often, and then does: a row enqueued
// later is sent without a wake-up.
func TestDrainFollowThroughAPoolerSaysItPolls(t *testing.T) {
	t.Parallel()
	u, schema, direct := pooledStore(t, "msgq_follow")
	e := &msgqEnv{t: t, env: pgEnv(t, "MSGQ_STORE="+u)}
	d := startDrain(t, e, "--follow", "--poll", "200ms")
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.stderr.String(), "polling instead"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("drain said nothing of polling in 30s: %s", d.stderr.String())
		}
	}
	for i := range 3 {
		key := fmt.Sprintf("late-%d", i)
		e.run("send", "--key", key, "--to", "+15551234567", "--text", "hi")
		for deadline := time.Now().Add(30 * time.Second); countIn(t, direct, schema, "state = 'sent' AND key = '"+key+"'") == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not sent after 30s: %s", key, d.stderr.String())
			}
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("drain after SIGTERM: %v: %s", err, d.stderr.String())
	}
	errs := d.stderr.String()
	if n := strings.Count(errs, "polling instead"); n != 1 {
		t.Errorf("drain said %d times that it polls, want once: %s", n, errs)
	}
	for _, want := range []string{"no wake-ups for enqueues behind a transaction pooler", "a pooler was detected", "every=200ms"} {
		if !strings.Contains(errs, want) {
			t.Errorf("drain's stderr does not say %q: %s", want, errs)
		}
	}
	if !strings.Contains(errs, "drain: claimed 3, sent 3") {
		t.Errorf("drain's summary: %s", errs)
	}
}

// TestPoolerSettingsInTheURL: behind a transaction pooler, which refuses
// search_path and options at connect time and could not keep them on the
// server connections it lends anyway, msgq applies the URL's settings to
// each transaction: search_path, options=-c ... (PGOPTIONS too), and the
// parameter beating the same setting in options, as on a server. Options
// that are not settings, and a pooler= msgq does not know, are bad input
// (exit 2, one line, nothing written); a setting the server refuses is its
// refusal (exit 1, saying where the setting went). pooler=transaction
// forces the mode on a server reached directly.
func TestPoolerSettingsInTheURL(t *testing.T) {
	t.Parallel()
	u, schema, direct := pooledStore(t, "msgq_settings")
	pooler := pgbouncerURL(t)
	_, other, _ := pooledStore(t, "msgq_settings_other")
	send := func(t *testing.T, store, key string, extra ...string) (string, string, int) {
		t.Helper()
		return runMsgq(t, pgEnv(t, append([]string{"MSGQ_STORE=" + store}, extra...)...),
			"send", "--key", key, "--to", "+15551234567", "--text", "hi", "-o", "json")
	}
	ok := func(t *testing.T, store, key, schema string, extra ...string) {
		t.Helper()
		if out, errs, code := send(t, store, key, extra...); code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
		if n := countIn(t, direct, schema, "key = '"+key+"'"); n != 1 {
			t.Errorf("%d rows with key %s in schema %s, want 1", n, key, schema)
		}
	}

	t.Run("search_path", func(t *testing.T) { ok(t, u, "sp-1", schema) })
	t.Run("options", func(t *testing.T) {
		ok(t, withParam(t, pooler, "options", "-c search_path="+schema+" -c statement_timeout=30s"), "opt-1", schema)
	})
	t.Run("PGOPTIONS", func(t *testing.T) {
		ok(t, pooler, "pgopt-1", schema, "PGOPTIONS=--search-path="+schema)
	})
	t.Run("the parameter beats options", func(t *testing.T) {
		ok(t, withParam(t, u, "options", "-c search_path="+other), "both-1", schema)
		var n int
		if err := direct.QueryRow(context.Background(), "SELECT count(*) FROM pg_tables WHERE schemaname = $1", other).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d tables (%v) in the schema options named: msgq migrated it", n, err)
		}
	})
	t.Run("a setting for each transaction", func(t *testing.T) {
		// A drain's claims and outcomes find the rows in the schema too:
		// each of its transactions has it.
		if out, errs, code := runMsgq(t, pgEnv(t, "MSGQ_STORE="+u), "drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s%s", code, out, errs)
		}
		if sent, all := countIn(t, direct, schema, "state = 'sent'"), countIn(t, direct, schema, "true"); sent == 0 || sent != all {
			t.Errorf("the drain sent %d of the schema's %d rows", sent, all)
		}
	})
	t.Run("nothing stays on the pooler's connections", func(t *testing.T) {
		// A client of the pooler that sets nothing sees the defaults
		// on the server connections msgq used, whichever it is lent.
		ctx := context.Background()
		cc, err := pgx.ParseConfig(pooler)
		if err != nil {
			t.Fatal(err)
		}
		cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		for range 10 {
			var sp string
			if err := c.QueryRow(ctx, "SHOW search_path").Scan(&sp); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(sp, schema) {
				t.Fatalf("another client of the pooler has search_path %q", sp)
			}
		}
	})

	bad := []struct{ name, store, want string }{
		{"options that are not settings", withParam(t, pooler, "options", "-B 100"),
			`options "-B 100" in the URL: "-B" is not a setting; behind a transaction pooler msgq applies settings`},
		{"options without a value", withParam(t, pooler, "options", "-c search_path"), `"search_path" is not name=value`},
		{"an unknown pooler", withParam(t, u, "pooler", "sometimes"), `pooler="sometimes" in the URL: want`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("bad-%d", rand.Uint32())
			out, errs, code := send(t, c.store, key)
			if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "msgq: store ") || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", code, out, errs, c.want)
			}
			if n := countIn(t, direct, schema, "key = '"+key+"'"); n != 0 {
				t.Errorf("%d rows written", n)
			}
		})
	}
	t.Run("a setting the server refuses", func(t *testing.T) {
		out, errs, code := send(t, withParam(t, u, "options", "-c log_connections=on"), "refused-1")
		if code != 1 || out != "" || !strings.Contains(errs, "the URL's settings are applied to each transaction, and the server refused them") ||
			!strings.Contains(errs, "log_connections") {
			t.Errorf("exit %d: %s%s", code, out, errs)
		}
	})
	t.Run("pooler=transaction on a server", func(t *testing.T) {
		direct := withParam(t, withParam(t, postgresURL(t), "search_path", schema), "pooler", "transaction")
		ok(t, direct, "forced-1", schema)
		_, errs, _ := runMsgq(t, pgEnv(t, "MSGQ_STORE="+direct), "drain", "--follow", "--max-duration", "300ms")
		if !strings.Contains(errs, "polling instead") || !strings.Contains(errs, "pooler=transaction in the URL") {
			t.Errorf("drain --follow with pooler=transaction: %s", errs)
		}
	})
}
