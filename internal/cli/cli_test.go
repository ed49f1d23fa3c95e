package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/msgq/msgq/internal/cli"
)

// TestMain lets this test binary run as `msgq` (testscript puts it on PATH
// under that name), so scripts and process tests exec the real command.
func TestMain(m *testing.M) {
	// Under -race every process sleeps atexit_sleep_ms (1s by default)
	// before it exits, so that racing goroutines can finish their reports.
	// The scripts and process tests run hundreds of msgq processes: that
	// second each was most of their time. A race in a child is still
	// reported when it happens, and its exit code (66) still fails the test.
	if !strings.Contains(os.Getenv("GORACE"), "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=10"))
	}
	testscript.Main(cleanEnv{m}, map[string]func(){"msgq": func() { os.Exit(cli.Main()) }})
}

// cleanEnv runs the tests (not msgq, when the binary runs as msgq: the
// tests set its environment) without what would steer msgq from the
// environment of whoever runs them: MSGQ_ settings and the clock offset
// hook, libpq's PG defaults, and their own config file and store (the XDG
// directories point into a temporary directory). No test then depends on
// a variable being unset. The harness's own MSGQ_TEST_ variables (the
// PostgreSQL, pooler and MTA addresses) stay.
type cleanEnv struct{ m *testing.M }

func (c cleanEnv) Run() int {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		steers := strings.HasPrefix(k, "MSGQ_") && (!strings.HasPrefix(k, "MSGQ_TEST_") || k == "MSGQ_TEST_CLOCK_OFFSET")
		if steers || strings.HasPrefix(k, "PG") {
			os.Unsetenv(k)
		}
	}
	dir, err := os.MkdirTemp("", "msgq-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	os.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	return c.m.Run()
}

// TestScripts runs the end-to-end scripts in testdata/script: each reads
// like a user's shell session against a fresh store, here the default
// SQLite file.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, scriptParams("sqlite", func(*testscript.Env) error { return nil }))
}

// TestScriptsPostgres runs the same scripts with MSGQ_STORE naming a
// fresh PostgreSQL schema per script (search_path in the URL, as a user
// would write it). Lines about the SQLite file itself are marked [sqlite];
// [postgres] lines check the same promise on the database (for instance
// that bad input created no tables).
func TestScriptsPostgres(t *testing.T) {
	t.Parallel()
	base := postgresURL(t)
	testscript.Run(t, scriptParams("postgres", func(env *testscript.Env) error {
		schema, drop, err := newSchema(base, "msgq_script")
		if err != nil {
			return err
		}
		env.Defer(drop)
		u, err := urlWith(base, "search_path", schema)
		if err != nil {
			return err
		}
		env.Setenv("MSGQ_STORE", u)
		// Scripts that change MSGQ_STORE can still name this store.
		env.Setenv("PGSTORE", u)
		env.Values[sqlURL{}] = u
		return nil
	}))
}

// TestScriptsPooler runs the scripts once more on PostgreSQL, through a
// transaction-mode pgbouncer (MSGQ_TEST_PGBOUNCER_URL; .ci/run starts
// one): MSGQ_STORE names the pooler, with the script's schema in
// search_path, as a user behind one would write it, and msgq finds out
// by itself that a pooler is there. [postgres] lines hold here too; sql
// looks at the server directly; [pooler] lines run in this run only.
func TestScriptsPooler(t *testing.T) {
	t.Parallel()
	base, pooler := postgresURL(t), pgbouncerURL(t)
	testscript.Run(t, scriptParams("pooler", func(env *testscript.Env) error {
		schema, drop, err := newSchema(base, "msgq_pooled")
		if err != nil {
			return err
		}
		env.Defer(drop)
		u, err := urlWith(pooler, "search_path", schema)
		if err != nil {
			return err
		}
		direct, err := urlWith(base, "search_path", schema)
		if err != nil {
			return err
		}
		env.Setenv("MSGQ_STORE", u)
		env.Setenv("PGSTORE", u)
		env.Values[sqlURL{}] = direct
		return nil
	}))
}

type sqlURL struct{}

func scriptParams(kind string, setup func(*testscript.Env) error) testscript.Params {
	return testscript.Params{
		Dir: filepath.Join("..", "..", "testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("XDG_DATA_HOME", filepath.Join(env.WorkDir, "data"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, "config"))
			env.Values[simsKey{}] = map[string]*scriptSim{}
			return setup(env)
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "sqlite", "pooler":
				return cond == kind, nil
			case "postgres": // directly or through the pooler
				return kind == "postgres" || kind == "pooler", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		RequireUniqueNames: true,
		Cmds: map[string]func(*testscript.TestScript, bool, []string){"exits": cmdExits, "sql": cmdSQL,
			"simserve": cmdSimServe, "deliveries": cmdDeliveries, "jsonvar": cmdJSONVar, "expand": cmdExpand, "sleep": cmdSleep},
	}
}

// cmdExits is `exits N cmd args...`: run cmd and require exit code N,
// keeping its stdout and stderr for the assertions that follow.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad code %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

// cmdSQL is `sql QUERY` ([postgres] scripts only): run QUERY in the
// script's schema and print each row on stdout, columns separated by a
// space, so that a script can look at the database behind msgq's back.
func cmdSQL(ts *testscript.TestScript, neg bool, args []string) {
	u, _ := ts.Value(sqlURL{}).(string)
	if neg || len(args) != 1 || u == "" {
		ts.Fatalf("usage: sql QUERY (in a PostgreSQL run)")
	}
	out := ts.Stdout() // an empty result is an empty stdout, not the last command's
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	ts.Check(err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, args[0])
	ts.Check(err)
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		ts.Check(err)
		cols := make([]string, len(vals))
		for i, v := range vals {
			cols[i] = fmt.Sprint(v)
		}
		fmt.Fprintln(out, strings.Join(cols, " "))
	}
	ts.Check(rows.Err())
}

// cmdJSONVar is `jsonvar VAR FIELD`: set VAR to the top-level string
// FIELD of the JSON object the last command printed (or of the first
// object of an array), e.g. a row's id or provider_id from show -o json,
// for files that expand uses.
func cmdJSONVar(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: jsonvar VAR FIELD")
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &obj); err != nil {
		// An array: its first object.
		var arr []map[string]any
		ts.Check(json.Unmarshal([]byte(ts.ReadFile("stdout")), &arr))
		if len(arr) == 0 {
			ts.Fatalf("jsonvar: stdout is an empty array")
		}
		obj = arr[0]
	}
	v, ok := obj[args[1]].(string)
	if !ok {
		ts.Fatalf("jsonvar: stdout has no string field %q", args[1])
	}
	ts.Setenv(args[0], v)
}

// cmdExpand is `expand FILE...`: replace ${VAR} in each file with the
// script's environment, plus ${NOW_UNIX}, the current Unix time (webhook
// timestamps that must be recent).
func cmdExpand(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: expand FILE...")
	}
	now := strconv.FormatInt(time.Now().Unix(), 10)
	for _, f := range args {
		path := ts.MkAbs(f)
		out := os.Expand(ts.ReadFile(f), func(k string) string {
			if k == "NOW_UNIX" {
				return now
			}
			return ts.Getenv(k)
		})
		ts.Check(os.WriteFile(path, []byte(out), 0o600))
	}
}

// cmdSleep is `sleep DURATION`: for a script that must let a scheduled
// time pass (never to wait for something to happen).
func cmdSleep(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sleep DURATION")
	}
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	time.Sleep(d)
}
