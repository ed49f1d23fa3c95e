package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/cli"
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
