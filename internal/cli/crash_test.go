package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// serveSim starts `msgq sim serve` as its own process and returns its URL.
func serveSim(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("msgq", append([]string{"sim", "serve", "--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("sim serve: %v", err)
	}
	m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("sim serve printed %q", line)
	}
	return m[1]
}

// delivery is one line of the simulator's /deliveries: what reached a
// phone or a mailbox, on which API and channel (a mail's subject too).
type delivery struct {
	Key, Ref, To, ID, API, Channel, Subject string
	At                                      time.Time
}

func deliveries(t *testing.T, base string) []delivery {
	t.Helper()
	resp, err := http.Get(base + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ds []delivery
	if err := json.NewDecoder(resp.Body).Decode(&ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

type row struct {
	ID, Key, State string
	Attempts       int
}

// msgqEnv runs msgq commands against one store and config.
type msgqEnv struct {
	t   *testing.T
	env []string
	// bin runs instead of the test binary's msgq when set: a release
	// build (buildMsgq), for what the race detector would distort.
	bin string
}

func (e *msgqEnv) cmd(args ...string) *exec.Cmd {
	bin := "msgq"
	if e.bin != "" {
		bin = e.bin
	}
	c := exec.Command(bin, args...)
	// TestMain (cleanEnv) has left out the runner's own MSGQ_ and PG
	// settings: the child gets what the test sets in e.env.
	c.Env = append(os.Environ(), e.env...)
	return c
}

func (e *msgqEnv) run(args ...string) string {
	e.t.Helper()
	out, err := e.cmd(args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		e.t.Fatalf("msgq %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

func (e *msgqEnv) rows() []row {
	e.t.Helper()
	var rs []row
	if err := json.Unmarshal([]byte(e.run("list", "--limit", "100000", "-o", "json")), &rs); err != nil {
		e.t.Fatal(err)
	}
	return rs
}

// setupDrainEnv writes identity as the config, points msgq at a fresh
// store of kind and enqueues n messages (to n recipients).
func setupDrainEnv(t *testing.T, kind, identity string, n int) (*msgqEnv, *backend) {
	t.Helper()
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, `{"key":"crash-%04d","to":"+1555%07d","text":"hello %d"}`+"\n", i, i, i)
	}
	return setupDrainEnvLines(t, kind, identity, lines.String())
}

// setupDrainEnvLines is setupDrainEnv with the send --file lines given.
func setupDrainEnvLines(t *testing.T, kind, identity, lines string) (*msgqEnv, *backend) {
	t.Helper()
	dir := t.TempDir()
	b := newBackend(t, kind, dir)
	cfg := filepath.Join(dir, "msgq.yaml")
	if err := os.WriteFile(cfg, []byte(identity), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &msgqEnv{t: t, env: append([]string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url}, mixedEnvVars...)}
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	e.run("send", "--file", in)
	return e, b
}

// sendingBy returns how many rows are in sending, and how many of them
// are leased by the process pid (leases name host:pid:random).
func sendingBy(t *testing.T, st store.Store, pid int) (all, mine int) {
	t.Helper()
	ms, err := st.MessageList(context.Background(), &store.ListParams{State: state.Sending, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf(":%d:", pid)
	for _, m := range ms {
		if strings.Contains(m.LeaseOwner, tag) {
			mine++
		}
	}
	return len(ms), mine
}
