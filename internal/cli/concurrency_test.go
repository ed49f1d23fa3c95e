package cli_test

import (
	"os"
	"os/exec"
	"testing"
)

type drainProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
}

func startDrain(t *testing.T, e *msgqEnv, args ...string) *drainProc {
	t.Helper()
	d := &drainProc{cmd: e.cmd(append([]string{"drain"}, args...)...), stderr: &syncBuffer{}}
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.cmd.Process.Kill() })
	return d
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
