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
	"syscall"
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

// TestKillNineMidDrainNeverSendsTwice SIGKILLs `msgq drain` processes
// while their calls are in flight against `msgq sim serve`, which accepts
// and then drops 10% of connections (and of SMTP transactions, after the
// final "."). One queue holds rows of every kind (mixedIdentities):
// WhatsApp, Twilio SMS and SMTP email have no idempotency key, so every
// lost answer is genuinely ambiguous; the http API deduplicates by key: a
// lost answer is retried with the same key and replayed by the provider,
// so fewer of its rows end unknown, and still none is delivered twice.
// Afterwards no message has reached its recipient twice, and every row is
// sent, unknown, or still leased (sending): none is lost, each uncertain
// one is visible.
//
// On SQLite one drain at a time is killed, five times over. On PostgreSQL
// eight drains run at once (claims skip each other's locked rows) and five
// of them are killed at different points of the run while the other three
// go on, then finish the queue and stop cleanly on SIGTERM.
func TestKillNineMidDrainNeverSendsTwice(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			killNine(t, kind)
		})
	}
}

func killNine(t *testing.T, kind string) {
	n := 300
	if kind == "postgres" {
		// Eight drains go through rows eight times as fast: more rows
		// keep the queue busy until the last kill.
		n = 1500
	}
	base, smtpPort := serveSimSMTP(t, "--fault-drop", "0.1", "--smtp-fault-drop", "0.1", "--latency", "30ms", "--seed", "11")
	names := []string{"wa", "tw", "mail", "web"}
	var lines strings.Builder
	for i := range n {
		name := names[i%len(names)]
		lines.WriteString(mixedLine(fmt.Sprintf("crash-%04d", i), name, i, fmt.Sprintf("hello %d", i)))
	}
	e, b := setupDrainEnvLines(t, kind, "default_identity: wa\nidentities:\n"+mixedIdentities(base, smtpPort, `    retry: {base: 10ms, cap: 50ms, max_attempts: 8}
    rate: "off"                   # this test is about kills, not pacing: WhatsApp's
    per_recipient_interval: "off" # default limits would only make it slower
`, names...), lines.String())

	// The test reads the store itself to kill each drain while it has
	// calls in flight: a fixed delay would, on a loaded machine, kill a
	// drain that had not started claiming yet.
	st := b.watch(t)
	var killed int
	if kind == "sqlite" {
		killed = killOneAtATime(t, e, st)
	} else {
		killed = killFiveOfEight(t, e, st, n)
	}
	if killed == 0 {
		t.Fatal("no drain was killed: the test proved nothing")
	}
	// Cron drains: whatever is still queued (retries wait milliseconds).
	for range 20 {
		e.run("drain")
		if q, _, _ := queueCounts(t, st); q == 0 {
			break
		}
		time.Sleep(60 * time.Millisecond)
	}

	counts, perRef, perAPI := checkAtMostOnce(t, e, base, n, "whatsapp", "twilio", "smtp", "http")
	if counts["sending"]+counts["unknown"] == 0 {
		t.Errorf("states %v: no call was in flight at a kill and no answer was lost; the test proved nothing", counts)
	}
	t.Logf("after %d kills: %v, %d deliveries (per API %v)", killed, counts, len(perRef), perAPI)
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

// killOneAtATime runs one drain at a time, five times, each killed once
// the store shows it has calls in flight.
func killOneAtATime(t *testing.T, e *msgqEnv, st store.Store) (killed int) {
	for round := range 5 {
		d := e.cmd("drain", "--follow", "--concurrency", "16")
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, mine := sendingBy(t, st, d.Process.Pid); mine > 0 {
				break
			}
		}
		time.Sleep(time.Duration(10*round) * time.Millisecond)
		if err := d.Process.Signal(syscall.SIGKILL); err == nil {
			killed++
		}
		_ = d.Wait()
	}
	return killed
}

// killFiveOfEight runs eight drains at once and kills five of them, each
// once the share of the queue in its schedule is done and the store shows
// the drain has calls in flight. The other three finish the queue (rows
// the killed ones leased stay in sending) and exit 0 on SIGTERM.
func killFiveOfEight(t *testing.T, e *msgqEnv, st store.Store, n int) (killed int) {
	var drains []*drainProc
	for range 8 {
		drains = append(drains, startDrain(t, e, "--follow", "--concurrency", "8"))
	}
	dead := map[int]bool{}
	for i, share := range []float64{0, 0.1, 0.25, 0.4, 0.55} {
		d := drains[i]
		pid := d.cmd.Process.Pid
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			q, s, _ := queueCounts(t, st)
			if float64(n-q-s) < share*float64(n) {
				continue
			}
			if _, mine := sendingBy(t, st, pid); mine > 0 {
				break
			}
			if q == 0 {
				break // nothing left to catch it with
			}
		}
		_, mine := sendingBy(t, st, pid)
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = d.cmd.Wait()
		dead[pid] = true
		if mine > 0 {
			killed++
		}
		t.Logf("killed drain %d with %d rows leased (share %.2f done)", i, mine, share)
	}
	// The survivors finish: nothing queued, and every row still in
	// sending is leased by a dead drain.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		q, s, _ := queueCounts(t, st)
		orphans := 0
		for pid := range dead {
			_, mine := sendingBy(t, st, pid)
			orphans += mine
		}
		if q == 0 && s == orphans {
			break
		}
		if time.Now().After(deadline) {
			for i, d := range drains[5:] {
				t.Logf("survivor %d stderr:\n%s", i, d.stderr.String())
			}
			t.Fatalf("the survivors left %d queued and %d sending (%d of them leased by killed drains)", q, s, orphans)
		}
	}
	for i, d := range drains[5:] {
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := d.cmd.Wait(); err != nil {
			t.Errorf("survivor %d after SIGTERM: %v: %s", i, err, d.stderr.String())
		}
	}
	return killed
}
