//go:build full

package cli_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDrainsOutliveLostDatabaseConnections runs three `msgq drain
// --follow` processes on PostgreSQL against `msgq sim serve --latency
// 30ms`, on one queue of WhatsApp, Twilio SMS and SMTP email rows
// (mixedIdentities; none has an idempotency key: a row sent twice would
// reach its recipient twice), and three times in the middle of the run
// terminates every database connection they have (pg_terminate_backend, as
// a failover or an administrator would): claims, outcome writes and the
// LISTEN connection alike. The drains must reconnect and finish the queue;
// no message reaches the phone twice; every row ends sent, or visibly
// uncertain (unknown, or sending under the lease of a claim whose commit
// answer was lost); and SIGTERM stops each drain with exit 0.
func TestDrainsOutliveLostDatabaseConnections(t *testing.T) {
	t.Parallel()
	const n = 3000
	dir := t.TempDir()
	b := newBackend(t, "postgres", dir)
	base, smtpPort := serveSimSMTP(t, "--latency", "30ms")
	// The drains' connections carry a name of their own, so that the test
	// terminates theirs and nobody else's.
	app := fmt.Sprintf("msgq_connloss_%d", rand.Uint32())
	cfg := filepath.Join(dir, "msgq.yaml")
	names := []string{"wa", "tw", "mail"}
	writeFile(t, cfg, "identities:\n"+mixedIdentities(base, smtpPort, `    rate: 1000/s
    retry: {base: 10ms, cap: 100ms, max_attempts: 8}
`, names...))
	e := &msgqEnv{t: t, env: append([]string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url}, mixedEnvVars...)}
	var lines strings.Builder
	for i := range n {
		lines.WriteString(mixedLine(fmt.Sprintf("loss-%04d", i), names[i%len(names)], i, fmt.Sprintf("hello %d", i)))
	}
	in := filepath.Join(dir, "in.jsonl")
	writeFile(t, in, lines.String())
	e.run("send", "--file", in)

	st := b.watch(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, postgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	de := &msgqEnv{t: t, env: append([]string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + withParam(t, b.url, "application_name", app)},
		mixedEnvVars...)}
	type running struct {
		*drainProc
		exited chan error
	}
	var drains []running
	for range 3 {
		d := startDrain(t, de, "--follow", "--concurrency", "16")
		r := running{d, make(chan error, 1)}
		go func() { r.exited <- d.cmd.Wait() }()
		drains = append(drains, r)
	}

	done := func() int {
		q, s, _ := queueCounts(t, st)
		return n - q - s
	}
	for _, share := range []float64{0.2, 0.45, 0.7} {
		for deadline := time.Now().Add(2 * time.Minute); done() < int(share*n); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d rows done after 2 minutes, waiting for %.0f%%", done(), n, share*100)
			}
		}
		var killed int
		if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "+
			"WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1", app).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed == 0 {
			t.Fatalf("no drain connection to terminate at %.0f%% done", share*100)
		}
		t.Logf("terminated %d drain connections with %d of %d rows done", killed, done(), n)
	}

	// The drains finish the queue over new connections.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		q, s, _ := queueCounts(t, st)
		if q == 0 {
			break
		}
		if time.Now().After(deadline) {
			for i, d := range drains {
				t.Logf("drain %d stderr:\n%s", i, d.stderr.String())
			}
			t.Fatalf("%d rows still queued and %d sending after 3 minutes", q, s)
		}
	}
	for i, d := range drains {
		select {
		case err := <-d.exited:
			t.Fatalf("drain %d exited before it was told to (%v): %s", i, err, d.stderr.String())
		default:
		}
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	warnings := 0
	for i, d := range drains {
		err := <-d.exited
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			t.Errorf("drain %d exited %d after SIGTERM: %s", i, ee.ExitCode(), d.stderr.String())
		default:
			t.Errorf("drain %d: %v", i, err)
		}
		if !strings.Contains(d.stderr.String(), "drain: claimed ") {
			t.Errorf("drain %d printed no summary: %s", i, d.stderr.String())
		}
		w := strings.Count(d.stderr.String(), "57P01") // terminating connection due to administrator command
		warnings += w
		t.Logf("drain %d met %d terminated connections; %s", i, w, lastLine(d.stderr.String()))
	}
	if warnings == 0 {
		t.Error("no drain met a terminated connection in a claim or an outcome write: the test proved little")
	}

	counts, perRef, perAPI := checkAtMostOnce(t, e, base, n, "whatsapp", "twilio", "smtp")
	t.Logf("states %v; %d reached their recipient (per API %v)", counts, len(perRef), perAPI)
}
