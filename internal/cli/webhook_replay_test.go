package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/webhook/verify"
)

// storeSize is what the store takes on disk for webhook deliveries, as
// far as a replay could grow it: on SQLite the file and its WAL once a
// checkpoint has moved the WAL into the file (so no process may hold the
// store); on PostgreSQL the webhook_events table with its TOAST and
// indexes.
func storeSize(t *testing.T, b *backend, dir string) int64 {
	t.Helper()
	ctx := context.Background()
	if b.kind == "postgres" {
		conn, err := pgx.Connect(ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int64
		if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size('webhook_events')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	path := filepath.Join(dir, "q.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	var busy, logged, moved int
	if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &moved); err != nil || busy != 0 {
		t.Fatalf("checkpoint: busy %d, %v", busy, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// stopServe ends a webhook serve with SIGTERM, which must exit 0.
func stopServe(t *testing.T, p *serveProcess) {
	t.Helper()
	_ = p.proc.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("webhook serve on SIGTERM: %v: %s", err, p.log.String())
	}
}

// replayStats is what msgq stats -o json says of webhooks.
type replayStats struct {
	Duplicates  int64 `json:"duplicate_webhooks"`
	Replayed    int64 `json:"replayed_webhooks"`
	Unprocessed int   `json:"unprocessed_webhooks"`
}

// TestAReplayedWhatsAppBodyCostsNoDisk is issue 24's first finding, with
// real processes on each store: one signed 2 MiB WhatsApp body (Meta's
// signature carries no time, so a capture never goes stale) posted to
// `webhook serve` 60 more times is answered 200 each time and grows the
// store by less than one copy (it grew by 60 before); the copies are
// counted, not lost.
func TestAReplayedWhatsAppBodyCostsNoDisk(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, webhookConfig)
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_VERIFY_TOKEN=v"}}
		e.run("migrate")

		// A real status, padded to 2 MiB with random bytes (base64, which
		// PostgreSQL's TOAST cannot compress: the copy costs its size).
		pad := make([]byte, 3<<19) // 1.5 MiB, 2 MiB in base64
		if _, err := rand.Read(pad); err != nil {
			t.Fatal(err)
		}
		status := waStatusBody("wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBIREPLAY", "delivered", 1764410400)
		body := append(bytes.TrimSuffix(status, []byte("}")), `,"padding":"`+base64.StdEncoding.EncodeToString(pad)+`"}`...)
		if len(body) < 2<<20 {
			t.Fatalf("body of %d bytes, want 2 MiB", len(body))
		}

		// The first copy, stored.
		p, url := startServe(t, e, "--process=false")
		if code, err := postSigned(url, body); err != nil || code != http.StatusOK {
			t.Fatalf("first copy: %d %v: %s", code, err, p.log.String())
		}
		stopServe(t, p)
		withOne := storeSize(t, b, dir)

		// 60 more.
		p, url = startServe(t, e, "--process=false")
		const replays = 60
		for i := range replays {
			if code, err := postSigned(url, body); err != nil || code != http.StatusOK {
				t.Fatalf("replay %d: %d %v: %s", i, code, err, p.log.String())
			}
		}
		stopServe(t, p)
		grown := storeSize(t, b, dir) - withOne
		t.Logf("%s: the store took %d bytes with one copy, and %d more after %d replays of a %d-byte body", kind, withOne, grown, replays, len(body))
		if grown >= int64(len(body)) {
			t.Errorf("%d replays grew the store by %d bytes, a copy or more (%d bytes)", replays, grown, len(body))
		}

		var s replayStats
		if err := json.Unmarshal([]byte(e.run("stats", "-o", "json")), &s); err != nil {
			t.Fatal(err)
		}
		if s.Unprocessed != 1 || s.Replayed != replays || s.Duplicates != replays {
			t.Errorf("stats %+v, want 1 delivery stored, %d replays and as many duplicate statuses", s, replays)
		}
	})
}

// TestAThousandReplaysOfAStandardWebhookMakeOneRow is issue 24's second
// finding, with real processes on each store: one Standard Webhooks
// delivery (http provider, one webhook-id) posted 1,000 times, 16 at a
// time (so that copies meet in one group commit too), within the
// timestamp tolerance, is answered 200 each time and stored once.
func TestAThousandReplaysOfAStandardWebhookMakeOneRow(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, "identities:\n  api:\n    provider: http\n    base_url: http://127.0.0.1:9\n"+
			"    token_env: MSGQ_TEST_TOKEN\n    webhook_secret_env: MSGQ_TEST_WEBHOOK_SECRET\n")
		whsec := "whsec_" + base64.StdEncoding.EncodeToString([]byte("replay-webhook-key-"+kind))
		secret, err := verify.ParseSecret(whsec)
		if err != nil {
			t.Fatal(err)
		}
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_WEBHOOK_SECRET=" + whsec}}
		e.run("migrate")
		p, url := startServe(t, e, "--process=false")

		now := time.Now()
		ts := strconv.FormatInt(now.Unix(), 10)
		body := fmt.Appendf(nil, `{"type":"message.status","timestamp":%q,"data":{"id":"msg_replayed","status":"delivered"}}`,
			now.UTC().Format(time.RFC3339))
		sig := verify.Sign("evt_replayed", ts, body, secret)
		const n, workers = 1000, 16
		var next, ok atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= n {
					req, err := http.NewRequest(http.MethodPost, url+"/webhooks/http", bytes.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("webhook-id", "evt_replayed")
					req.Header.Set("webhook-timestamp", ts)
					req.Header.Set("webhook-signature", sig)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		stopServe(t, p)
		if ok.Load() != n {
			t.Fatalf("%d of %d posts answered 200: %s", ok.Load(), n, p.log.String())
		}
		var s replayStats
		if err := json.Unmarshal([]byte(e.run("stats", "-o", "json")), &s); err != nil {
			t.Fatal(err)
		}
		if s.Unprocessed != 1 || s.Replayed != n-1 || s.Duplicates != n-1 {
			t.Errorf("stats %+v, want 1 delivery stored and %d replays (each a duplicate status)", s, n-1)
		}
		st := b.watch(t)
		evs, err := st.WebhookPending(context.Background(), 10)
		if err != nil || len(evs) != 1 || !bytes.Equal(evs[0].Body, body) || evs[0].Headers["webhook-id"] != "evt_replayed" {
			t.Fatalf("stored %d deliveries, %v; want the delivery once", len(evs), err)
		}
	})
}
