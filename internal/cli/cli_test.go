package cli_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/msgq/msgq/internal/cli"
)

// TestMain lets this test binary run as `msgq` (testscript puts it on PATH
// under that name), so scripts and process tests exec the real command.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"msgq": func() { os.Exit(cli.Main()) }})
}

// TestScripts runs the end-to-end scripts in testdata/script: each reads
// like a user's shell session against a fresh store.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("..", "..", "testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("XDG_DATA_HOME", filepath.Join(env.WorkDir, "data"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, "config"))
			return nil
		},
		RequireUniqueNames: true,
		Cmds:               map[string]func(*testscript.TestScript, bool, []string){"exits": cmdExits},
	})
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
