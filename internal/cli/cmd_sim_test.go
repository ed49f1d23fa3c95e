package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/cli"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// syncBuffer is a bytes.Buffer a test may read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`^sim: listening on (http://127\.0\.0\.1:\d+)\n$`)

// startSim runs `msgq sim serve --addr 127.0.0.1:0 args...` in a goroutine
// and returns its base URL, a stop function that cancels its context, and
// the channel its exit code arrives on.
func startSim(t *testing.T, args ...string) (base string, stop context.CancelFunc, code <-chan int, stderr *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout syncBuffer
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"sim", "serve", "--addr", "127.0.0.1:0"}, args...),
			&cli.IOStreams{In: strings.NewReader(""), Out: &stdout, Err: stderr})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case c := <-done:
			cancel()
			t.Fatalf("sim serve exited %d: %s", c, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no listening line; stderr %q", stderr.String())
		}
	}
	t.Cleanup(cancel)
	if stdout.String() != "" {
		t.Errorf("stdout %q", stdout.String())
	}
	return base, cancel, done, stderr
}

func simPost(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer test")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func waitExit(t *testing.T, stop context.CancelFunc, code <-chan int, stderr *syncBuffer) {
	t.Helper()
	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d after cancel; stderr %q", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim serve did not stop after its context was cancelled")
	}
	if got := stderr.String(); !listening.MatchString(got) {
		t.Fatalf("stderr %q, want only the listening line", got)
	}
}

func TestSimServe(t *testing.T) {
	t.Parallel()
	base, stop, code, stderr := startSim(t, "--seed", "7", "--latency", "1ms")
	body := `{"ref":"01REF","to":"+15551234567","channel":"sms","text":"hi"}`
	resp, got := simPost(t, base+"/v1/messages", "order-1", body)
	if resp.StatusCode != http.StatusAccepted || got != `{"id":"msg_1","status":"accepted"}` {
		t.Fatalf("send: %d %s", resp.StatusCode, got)
	}
	resp, got = simPost(t, base+"/v1/messages", "order-1", body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", resp.StatusCode, got)
	}
	wa := `{"messaging_product":"whatsapp","to":"+15557654321","type":"text","text":{"body":"hi"},"biz_opaque_callback_data":"02REF"}`
	if resp, got := simPost(t, base+"/v21.0/1234/messages", "", wa); resp.StatusCode != http.StatusOK {
		t.Fatalf("whatsapp: %d %s", resp.StatusCode, got)
	}

	r, err := http.Get(base + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	var ds []map[string]string
	err = json.NewDecoder(r.Body).Decode(&ds)
	r.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0]["key"] != "order-1" || ds[0]["ref"] != "01REF" || ds[0]["api"] != "http" ||
		ds[1]["ref"] != "02REF" || ds[1]["api"] != "whatsapp" || ds[1]["id"] != "wamid.2" {
		t.Fatalf("deliveries %v", ds)
	}
	waitExit(t, stop, code, stderr)
}

// TestSimServeFlags: the fault flags reach the server.
func TestSimServeFlags(t *testing.T) {
	t.Parallel()
	base, stop, code, stderr := startSim(t, "--fault-429", "1", "--idempotent=false")
	resp, got := simPost(t, base+"/v1/messages", "k", `{"to":"+15551234567","text":"hi"}`)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(got, `"rate_limited"`) {
		t.Fatalf("got %d %v %s", resp.StatusCode, resp.Header, got)
	}
	waitExit(t, stop, code, stderr)
}

// TestSimServeStopsWhileSlow: a slow answer in flight does not hold up the
// shutdown.
func TestSimServeStopsWhileSlow(t *testing.T) {
	t.Parallel()
	base, stop, code, stderr := startSim(t, "--fault-slow", "1", "--slow-delay", "1h")
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"to":"+15551234567","text":"hi"}`))
		req.Header.Set("Authorization", "Bearer test")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for { // wait until the slow call was accepted
		r, err := http.Get(base + "/deliveries")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(b), `"msg_1"`) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	waitExit(t, stop, code, stderr)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %v", took)
	}
	if err := <-errc; err == nil {
		t.Fatal("the slow call got an answer at shutdown; want the connection closed without one")
	}
}

// TestSimServeWebhookFlagErrors: a bad webhook flag is a usage error, one
// line, exit 2, before anything listens, and no secret or URL password is
// echoed. (Not parallel: t.Setenv.)
func TestSimServeWebhookFlagErrors(t *testing.T) {
	t.Setenv("MSGQ_TEST_SIM_BAD_SECRET", "whsec_!!!topsecret")
	t.Setenv("MSGQ_TEST_SIM_APP_SECRET", "topsecret")
	t.Setenv("MSGQ_TEST_SIM_EMPTY", "")
	url := []string{"--webhook-url", "http://127.0.0.1:8080"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{url, "--webhook-url needs --webhook-secret-env (http API) or --app-secret-env (WhatsApp)"},
		{[]string{"--app-secret-env", "MSGQ_TEST_SIM_APP_SECRET"}, "--webhook-secret-env and --app-secret-env need --webhook-url"},
		{[]string{"--webhook-url", "ftp://u:topsecret@h", "--app-secret-env", "MSGQ_TEST_SIM_APP_SECRET"}, "--webhook-url must be an http:// or https:// URL"},
		{[]string{"--webhook-url", "127.0.0.1:8080", "--app-secret-env", "MSGQ_TEST_SIM_APP_SECRET"}, "--webhook-url must be"},
		{[]string{"--webhook-url", "http://h/?x=topsecret", "--app-secret-env", "MSGQ_TEST_SIM_APP_SECRET"}, "--webhook-url must be"},
		{append(url, "--webhook-secret-env", "MSGQ_TEST_SIM_UNSET_VARIABLE"), "--webhook-secret-env: environment variable MSGQ_TEST_SIM_UNSET_VARIABLE is not set"},
		{append(url, "--app-secret-env", "MSGQ_TEST_SIM_EMPTY"), "--app-secret-env: environment variable MSGQ_TEST_SIM_EMPTY is not set"},
		{append(url, "--webhook-secret-env", "MSGQ_TEST_SIM_BAD_SECRET"), "--webhook-secret-env: MSGQ_TEST_SIM_BAD_SECRET does not hold whsec_ secrets"},
		{append(url, "--webhook-secret-env", "MSGQ_TEST_SIM_APP_SECRET"), "does not hold whsec_ secrets"},
		{[]string{"--status-delay", "0s"}, "--status-delay must be greater than 0 (got 0s)"},
		{[]string{"--status-delay", "-1s"}, "--status-delay must be greater than 0 (got -1s)"},
		{[]string{"--read-after", "-1s"}, "--read-after must not be negative (got -1s)"},
		{[]string{"--read-after", "soon"}, `invalid argument "soon" for "--read-after" flag`},
		{[]string{"--smtp-fault-4xx", "0.5"}, "--smtp-fault-4xx, --smtp-fault-5xx and --smtp-fault-drop need --smtp-addr"},
		{[]string{"--smtp-addr", "127.0.0.1"}, `--smtp-addr "127.0.0.1": address 127.0.0.1: missing port in address`},
		{[]string{"--smtp-addr", "127.0.0.1:0", "--smtp-fault-drop", "1.5"}, "--smtp-fault-drop must be a probability between 0 and 1 (got 1.5)"},
		{[]string{"--smtp-addr", "127.0.0.1:0", "--smtp-fault-4xx", "0.6", "--smtp-fault-5xx", "0.6"}, "smtp fault probabilities add up to 1.2; at most 1"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var stdout, stderr syncBuffer
		code := cli.Run(ctx, append([]string{"sim", "serve", "--addr", "127.0.0.1:0"}, tc.args...),
			&cli.IOStreams{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
		cancel()
		got := stderr.String()
		if code != 2 || !strings.HasPrefix(got, "msgq: ") || !strings.Contains(got, tc.want) ||
			strings.Count(got, "\n") != 1 || stdout.String() != "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, got, tc.want)
		}
		if strings.Contains(got, "topsecret") {
			t.Errorf("%v: stderr shows a secret: %q", tc.args, got)
		}
	}
}

// TestSimServeWebhooks: the flags reach the simulator; its statuses are
// signed with the secrets from the environment, and the shutdown counts
// them. (Not parallel: t.Setenv.)
func TestSimServeWebhooks(t *testing.T) {
	const appSecret = "sim-cli-app-secret"
	whsec := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sim-cli-webhook-key"))
	secret, err := verify.ParseSecret(whsec)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MSGQ_TEST_SIM_APP_SECRET", appSecret)
	t.Setenv("MSGQ_TEST_SIM_WEBHOOK_SECRET", whsec)

	var mu sync.Mutex
	got := map[string][]string{} // provider id -> statuses
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b *payload.Batch
		var err error
		switch r.URL.Path {
		case "/webhooks/whatsapp":
			if err = verify.WhatsApp(body, r.Header.Get("X-Hub-Signature-256"), []byte(appSecret)); err == nil {
				b, err = payload.WhatsApp(body)
			}
		case "/webhooks/http":
			id := r.Header.Get("webhook-id")
			if err = verify.Verify(id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body,
				time.Now(), 0, secret); err == nil {
				b, err = payload.HTTP(body, id)
			}
		default:
			err = fmt.Errorf("path %s", r.URL.Path)
		}
		if err != nil || len(b.Statuses) != 1 {
			t.Errorf("webhook %s %s: %v", r.URL.Path, body, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		got[b.Statuses[0].ProviderID] = append(got[b.Statuses[0].ProviderID], string(b.Statuses[0].Status))
		mu.Unlock()
	}))
	defer rcv.Close()

	base, stop, code, stderr := startSim(t, "--webhook-url", rcv.URL+"/", "--app-secret-env", "MSGQ_TEST_SIM_APP_SECRET",
		"--webhook-secret-env", "MSGQ_TEST_SIM_WEBHOOK_SECRET", "--status-delay", "10ms", "--read-after", "10ms")
	if resp, body := simPost(t, base+"/v1/messages", "k1", `{"ref":"R1","to":"+15551234567","text":"hi"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("http send: %d %s", resp.StatusCode, body)
	}
	wa := `{"messaging_product":"whatsapp","to":"+15557654321","type":"text","text":{"body":"hi"},"biz_opaque_callback_data":"R2"}`
	if resp, body := simPost(t, base+"/v21.0/1234/messages", "", wa); resp.StatusCode != http.StatusOK {
		t.Fatalf("whatsapp send: %d %s", resp.StatusCode, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got["msg_1"]) + len(got["wamid.2"])
		mu.Unlock()
		if n == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("statuses %v, want sent, delivered and read for msg_1 and wamid.2", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d: %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim serve did not stop")
	}
	out := stderr.String()
	if !strings.HasSuffix(out, "\nsim: webhooks: 6 sent, 0 retried, 0 failed, 0 dropped\n") || strings.Count(out, "\n") != 2 {
		t.Errorf("stderr %q, want the listening line and the webhook count", out)
	}
	if strings.Contains(out, appSecret) || strings.Contains(out, whsec) {
		t.Errorf("stderr shows a secret: %q", out)
	}
}
