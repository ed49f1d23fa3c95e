package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/msgq/msgq/internal/cli"
)

type sendOut struct {
	ID       string `json:"id"`
	Key      string `json:"key"`
	State    string `json:"state"`
	Replayed bool   `json:"replayed"`
	To       string `json:"to"`
}

// TestSameKeyFromGoroutinesAndProcesses races 32 in-process invocations
// (each with its own store handle) and 4 separate `msgq send` processes on
// one key against a store that does not exist yet: exactly one creates the
// row, every other reports a replay of it.
func TestSameKeyFromGoroutinesAndProcesses(t *testing.T) {
	t.Parallel()
	storeURL := "sqlite:" + filepath.Join(t.TempDir(), "race.db")
	args := []string{"send", "--store", storeURL, "--key", "race-1", "--to", "+15551234567",
		"--template", "order_update", "--param", "Ada", "-o", "json"}

	const goroutines, processes = 32, 4
	outs := make([][]byte, goroutines+processes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range processes {
		cmd := exec.Command("msgq", args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := cmd.Run(); err != nil {
				t.Errorf("process %d: %v: %s", i, err, stderr.String())
			}
			outs[goroutines+i] = stdout.Bytes()
		}()
	}
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var stdout, stderr bytes.Buffer
			ios := &cli.IOStreams{In: os.Stdin, Out: &stdout, Err: &stderr}
			if code := cli.Run(context.Background(), args, ios); code != 0 {
				t.Errorf("goroutine %d: exit %d: %s", i, code, stderr.String())
			}
			outs[i] = stdout.Bytes()
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}

	created := 0
	var id string
	for i, out := range outs {
		var r sendOut
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("sender %d printed %q: %v", i, out, err)
		}
		if !r.Replayed {
			created++
		}
		if id == "" {
			id = r.ID
		}
		if r.ID != id || r.Key != "race-1" || r.State != "queued" || r.To != "+15551234567" {
			t.Errorf("sender %d got %+v, others got id %s", i, r, id)
		}
	}
	if created != 1 {
		t.Errorf("%d senders created the row, want exactly 1 (the rest replays)", created)
	}

	var stdout bytes.Buffer
	if code := cli.Run(context.Background(), []string{"list", "--store", storeURL, "-o", "json"},
		&cli.IOStreams{Out: &stdout, Err: os.Stderr}); code != 0 {
		t.Fatalf("list: exit %d", code)
	}
	var rows []sendOut
	if err := json.Unmarshal(stdout.Bytes(), &rows); err != nil || len(rows) != 1 || rows[0].ID != id {
		t.Errorf("list after the race: %s (%v), want the one row %s", stdout.String(), err, id)
	}
}
