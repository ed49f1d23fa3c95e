package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/verify"
)

const (
	testAppSecret = "test-app-secret"
	testPhoneID   = "106540352242922"
	webhookConfig = "identities:\n  shop:\n    provider: whatsapp\n    phone_number_id: \"" + testPhoneID + "\"\n" +
		"    token_env: MSGQ_TEST_TOKEN\n    app_secret_env: MSGQ_TEST_APP_SECRET\n    verify_token_env: MSGQ_TEST_VERIFY_TOKEN\n"
)

// startServe starts `msgq webhook serve` on a free loopback port and waits
// until it listens.
func startServe(t *testing.T, e *msgqEnv, args ...string) (*serveProcess, string) {
	t.Helper()
	return startListener(t, e, "webhook: listening on ", append([]string{"webhook", "serve", "--addr", "127.0.0.1:0"}, args...)...)
}

// startListener starts a msgq command that serves HTTP and waits for the
// line (starting with prefix, then the URL) that says it listens. Its
// stderr is kept for failure messages.
func startListener(t *testing.T, e *msgqEnv, prefix string, args ...string) (*serveProcess, string) {
	t.Helper()
	c := e.cmd(args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &serveProcess{proc: c.Process, done: make(chan error, 1), log: &syncBuffer{}}
	t.Cleanup(func() { _ = c.Process.Kill() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.log.Write([]byte(line + "\n"))
			if u, ok := strings.CutPrefix(line, prefix); ok && !sent {
				addr <- u
				sent = true
			}
		}
	}()
	go func() { p.done <- c.Wait() }()
	select {
	case u := <-addr:
		return p, u
	case err := <-p.done:
		t.Fatalf("msgq %s exited before listening: %v: %s", args[0], err, p.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("msgq %s did not listen within 30s: %s", args[0], p.log.String())
	}
	return nil, ""
}

type serveProcess struct {
	proc *os.Process
	done chan error
	log  *syncBuffer
}

func waStatusBody(wamid, status string, ts int64) []byte {
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":`+
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":%q},`+
		`"statuses":[{"id":%q,"status":%q,"timestamp":"%d","recipient_id":"15551234567"}]},"field":"messages"}]}]}`,
		testPhoneID, wamid, status, ts)
}

func postSigned(url string, body []byte) (int, error) {
	resp, err := postSignedResponse(url, body)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// postSignedResponse posts body to /webhooks/whatsapp signed with the test
// app secret, and returns the answer (its body closed) for its headers.
func postSignedResponse(url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/whatsapp", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Hub-Signature-256", verify.SignWhatsApp(body, []byte(testAppSecret)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// acceptedRows enqueues n rows and takes each through a claim and an
// accepted answer carrying its wamid, as a drain would.
func acceptedRows(t *testing.T, st store.Store, n int) (ids, wamids []string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		// To the recipient waStatusBody names: a status naming another
		// recipient than its row's is set aside as suspect.
		res, err := st.MessageEnqueue(ctx, &store.EnqueueParams{Key: fmt.Sprintf("wh-%03d", i), To: "+15551234567",
			Channel: store.ChannelWhatsApp, Identity: "shop", Payload: store.Payload{Template: "order_update", Lang: "en"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Message.ID)
		wamids = append(wamids, fmt.Sprintf("wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI%03d", i))
	}
	cl, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "test", LeaseFor: time.Minute, Limit: n})
	if err != nil || len(cl) != n {
		t.Fatalf("claim: %v (%d of %d rows)", err, len(cl), n)
	}
	for i, id := range ids {
		if _, err := st.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sending, LeaseOwner: "test",
			Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain, ProviderID: wamids[i]}); err != nil {
			t.Fatal(err)
		}
	}
	return ids, wamids
}

// TestServeKilledBetweenStoringAndProcessing: every delivery answered 200
// is in the store even when `webhook serve` is killed with SIGKILL the
// moment the answer is out, and a restarted serve processes it. Nothing
// acknowledged is lost; nothing is applied twice.
func TestServeKilledBetweenStoringAndProcessing(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, webhookConfig)
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_VERIFY_TOKEN=v"}}
		e.run("migrate")
		st, err := b.open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		ctx := context.Background()
		const n = 40
		ids, wamids := acceptedRows(t, st, n)

		// 1. Receive only: the kill lands, by construction, after storing
		// and before any processing.
		p, url := startServe(t, e, "--process=false")
		for i := range n / 2 {
			if code, err := postSigned(url, waStatusBody(wamids[i], "delivered", 1764410400)); err != nil || code != 200 {
				t.Fatalf("post %d: %d %v", i, code, err)
			}
		}
		_ = p.proc.Signal(syscall.SIGKILL)
		<-p.done
		pending, err := st.WebhookPending(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != n/2 {
			t.Fatalf("after kill -9: %d stored deliveries, want the %d acknowledged", len(pending), n/2)
		}
		if m, _ := st.MessageGet(ctx, store.DefaultTenant, ids[0]); m.State != state.Sent {
			t.Fatalf("row %s before processing, want sent", m.State)
		}

		// 2. Processing on, killed the moment the last answer is out, with
		// many posts in flight: acknowledged means stored.
		p, url = startServe(t, e)
		var wg sync.WaitGroup
		var mu sync.Mutex
		acked := 0
		for i := n / 2; i < n; i++ {
			wg.Go(func() {
				code, err := postSigned(url, waStatusBody(wamids[i], "delivered", 1764410400))
				if err == nil && code == 200 {
					mu.Lock()
					acked++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		_ = p.proc.Signal(syscall.SIGKILL)
		<-p.done
		if acked != n/2 {
			t.Fatalf("%d of %d posts acknowledged before the kill", acked, n/2)
		}

		// 3. A restart processes whatever was left, then stops cleanly.
		p, _ = startServe(t, e)
		deadline := time.Now().Add(30 * time.Second)
		for {
			delivered := 0
			for _, id := range ids {
				if m, err := st.MessageGet(ctx, store.DefaultTenant, id); err == nil && m.State == state.Delivered {
					delivered++
				}
			}
			if delivered == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d rows delivered 30s after the restart: %s", delivered, n, p.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = p.proc.Signal(syscall.SIGTERM)
		if err := <-p.done; err != nil {
			t.Fatalf("webhook serve on SIGTERM: %v: %s", err, p.log.String())
		}
		if pending, _ := st.WebhookPending(ctx, 1000); len(pending) != 0 {
			t.Errorf("%d deliveries left unprocessed", len(pending))
		}
		// Each row took its one delivered status once: one webhook history
		// row each, however the kills fell.
		for _, id := range ids {
			hist, err := st.MessageHistory(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, h := range hist {
				if h.Source == store.SourceWebhook {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("row %s has %d webhook history rows, want 1", id, n)
			}
		}
	})
}

// TestServeDedupesAndAppliesForwardOnly posts, to a real `webhook serve`
// on each store, the same status three times and sent/delivered/read in
// shuffled orders (each status twice): every row ends in the highest
// status it was told, and every repeat is counted, never applied twice.
func TestServeDedupesAndAppliesForwardOnly(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		dir := t.TempDir()
		b := newBackend(t, kind, dir)
		cfg := filepath.Join(dir, "msgq.yaml")
		writeFile(t, cfg, webhookConfig)
		e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url, "MSGQ_TEST_TOKEN=t",
			"MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_VERIFY_TOKEN=v"}}
		e.run("migrate")
		ctx := context.Background()
		st, err := b.open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		const rows = 7
		ids, wamids := acceptedRows(t, st, rows)
		p, url := startServe(t, e, "--poll", "50ms")
		post := func(i int, status string) {
			t.Helper()
			ts := map[string]int64{"sent": 1764410400, "delivered": 1764410405, "read": 1764410460}[status]
			if code, err := postSigned(url, waStatusBody(wamids[i], status, ts)); err != nil || code != 200 {
				t.Fatalf("post: %d %v", code, err)
			}
		}
		for range 3 {
			post(0, "delivered")
		}
		rnd := rand.New(rand.NewPCG(uint64(len(kind)), 7))
		want := map[string]state.State{ids[0]: state.Delivered}
		for i := 1; i < rows; i++ {
			seq := []string{"sent", "delivered", "read", "sent", "delivered", "read"}
			rnd.Shuffle(len(seq), func(a, b int) { seq[a], seq[b] = seq[b], seq[a] })
			for j, s := range seq {
				post(i, s)
				if j == 2 {
					time.Sleep(60 * time.Millisecond) // let the worker apply part of the sequence first
				}
			}
			want[ids[i]] = state.Read
		}
		// 2 repeats of the first row's status, 3 of each other row's.
		wantDup := int64(2 + 3*(rows-1))
		deadline := time.Now().Add(30 * time.Second)
		for {
			ws, err := st.WebhookStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			done := ws.UnprocessedWebhooks == 0 && ws.DuplicateWebhooks == wantDup
			for id, w := range want {
				if m, err := st.MessageGet(ctx, store.DefaultTenant, id); err != nil || m.State != w {
					done = false
				}
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 30s: %+v (want %d duplicates): %s", ws, wantDup, p.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		for i, id := range ids {
			hist, err := st.MessageHistory(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			for _, h := range hist {
				if h.Source == store.SourceWebhook {
					n++
				}
			}
			// Each distinct status reaches history once, applied or not.
			if wantN := map[bool]int{true: 1, false: 3}[i == 0]; n != wantN {
				t.Errorf("row %d: %d webhook history rows, want %d", i, n, wantN)
			}
		}
		_ = p.proc.Signal(syscall.SIGTERM)
		if err := <-p.done; err != nil {
			t.Fatalf("webhook serve on SIGTERM: %v", err)
		}
	})
}

// TestWebhookServeStartsWhileTheStoreIsUnreachable: a `webhook serve`
// whose PostgreSQL is down at start listens anyway and answers 503 with
// Retry-After (nothing stored, /healthz too), and once the server can be
// reached it stores and applies the provider's retry of the same delivery.
func TestWebhookServeStartsWhileTheStoreIsUnreachable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := newBackend(t, "postgres", dir)
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, webhookConfig)
	env := []string{"MSGQ_CONFIG=" + cfg, "MSGQ_TEST_TOKEN=t", "MSGQ_TEST_APP_SECRET=" + testAppSecret, "MSGQ_TEST_VERIFY_TOKEN=v"}
	(&msgqEnv{t: t, env: append(append([]string{}, env...), "MSGQ_STORE="+b.url)}).run("migrate")
	st := b.watch(t)
	ctx := context.Background()
	ids, wamids := acceptedRows(t, st, 1)

	px := newTCPProxy(t, "127.0.0.1:5432")
	px.cut()
	url := strings.Replace(b.url, "127.0.0.1:5432", px.addr, 1)
	if url == b.url {
		t.Fatalf("store URL %s does not name 127.0.0.1:5432", b.url)
	}
	e := &msgqEnv{t: t, env: append(append([]string{}, env...), "MSGQ_STORE="+url)}
	p, base := startServe(t, e, "--poll", "50ms")

	body := waStatusBody(wamids[0], "delivered", 1764410405)
	post := func() *http.Response {
		t.Helper()
		resp, err := postSignedResponse(base, body)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r := post()
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a delivery while the store is down at start: %d, Retry-After %q; want 503 with Retry-After", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if code := healthz(t, base); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz while the store is down at start: %d, want 503", code)
	}
	if !strings.Contains(p.log.String(), "answering 503 until it opens") {
		t.Fatalf("webhook serve did not say that the store is unreachable: %s", p.log.String())
	}
	if ws, err := st.WebhookStats(ctx); err != nil || ws.UnprocessedWebhooks != 0 || ws.DuplicateWebhooks != 0 {
		t.Fatalf("a 503 stored something: %+v, %v", ws, err)
	}

	// The server is back: the provider's retry of the delivery is stored,
	// answered 200 and applied.
	px.resume(t)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := post()
		if r.StatusCode == http.StatusOK {
			break
		}
		if r.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("while the store comes back: %d, want 503 or 200", r.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still 503 two minutes after the store came back: %s", p.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		m, err := st.MessageGet(ctx, "", ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if m.State == state.Delivered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivery answered 200 was not applied: %s is %s", ids[0], m.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := healthz(t, base); code != http.StatusOK {
		t.Fatalf("/healthz once the store is open: %d, want 200", code)
	}
	_ = p.proc.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("webhook serve after SIGTERM: %v: %s", err, p.log.String())
	}
}

func healthz(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
