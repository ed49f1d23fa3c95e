package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// budgetRig is a receiver whose budget holds one large body (and the part
// kept back for small ones), over a real SQLite store on loopback.
func budgetRig(t *testing.T) (*httptest.Server, *http.Client) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rcv := webhook.NewReceiver(webhook.Config{
		Store:      st,
		Routes:     []webhook.Route{{Identity: "shop", Kind: &whatsapp.Kind, Verifier: &whatsapp.Verifier{AppSecret: []byte(appSecret)}}},
		MaxBody:    1 << 20,
		MaxPending: 1<<20 + 512<<10, // reserve for small bodies: 256 KiB
		RetryAfter: 7 * time.Second,
	})
	srv := httptest.NewServer(rcv.Handler())
	t.Cleanup(func() {
		srv.Close()
		rcv.Close()
		st.Close()
	})
	// A transport of its own, so that a held request's connection is never
	// reused by another.
	return srv, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// holdBody starts a POST whose body (of the declared length, -1 for
// chunked) never finishes until the returned function is called: the
// receiver reads and holds the first send bytes while it waits for the rest.
// answered delivers the status the request got (0: no answer).
func holdBody(t *testing.T, c *http.Client, url string, declared int64, hdr map[string]string, send int) (answered <-chan int, finish func() int) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url+webhook.PathWhatsApp, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = declared
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	code := make(chan int, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			code <- 0
			return
		}
		resp.Body.Close()
		code <- resp.StatusCode
	}()
	// Part of the body, so that the server is reading it. Written from a
	// goroutine: the pipe blocks until the transport takes it.
	go pw.Write([]byte(strings.Repeat("x", send)))
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	return code, func() int {
		pw.CloseWithError(io.ErrUnexpectedEOF)
		return <-code
	}
}

var bogusSig = map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64)}

// postLarge posts a complete large body with a well-formed but wrong
// signature; without a length when chunked. It returns the first answer
// the client reads.
func postLarge(t *testing.T, c *http.Client, url string, n int, chunked bool) *http.Response {
	t.Helper()
	var body io.Reader = strings.NewReader(strings.Repeat("x", n))
	if chunked {
		body = io.MultiReader(body)
	}
	req, err := http.NewRequest(http.MethodPost, url+webhook.PathWhatsApp, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range bogusSig {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		// The server answered without reading the body and closed the
		// connection while the client was still sending it: the reset
		// can reach the client before the answer does. Ask again.
		t.Logf("posting a large body: %v; again", err)
		return postLarge(t, c, url, n, chunked)
	}
	resp.Body.Close()
	return resp
}

// TestUnsignedFloodIsRefusedBeforeItsBodyIsRead pins issue 12: a body whose
// request has no signature header is never read, so it costs no memory: its
// 401 comes while the client is still (never) sending it.
func TestUnsignedFloodIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	srv, c := budgetRig(t)
	for _, declared := range []int64{1 << 20, -1} {
		got := false
		for attempt := 1; attempt <= 5 && !got; attempt++ {
			answered, _ := holdBody(t, c, srv.URL, declared, nil, 64<<10)
			switch code := <-answered; code {
			case http.StatusUnauthorized:
				got = true
			case 0:
				// No answer reached the client: the server closed the
				// connection it never read, and on a loaded host the
				// reset can overtake the 401 (net/http waits only 500 ms
				// after its half-close). That is the transport losing
				// the answer, not the receiver reading the body, which
				// is still unfinished: ask again, as postLarge does.
				t.Logf("declared %d, attempt %d: no answer read; again", declared, attempt)
			default:
				t.Fatalf("declared %d: answered %d, want 401 without the body", declared, code)
			}
		}
		if !got {
			t.Fatalf("declared %d: no 401 read in 5 attempts", declared)
		}
	}
}

// TestBodiesBeyondThePendingBudgetGet503AndValidDeliveriesGetThrough pins
// issue 12: while large unverified bodies fill the budget, another large one
// is refused with 503 and Retry-After before it is read, and a small signed
// delivery is still stored and answered 200. Once the held body is gone,
// a large body fits again.
func TestBodiesBeyondThePendingBudgetGet503AndValidDeliveriesGetThrough(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		name := map[bool]string{false: "with a content length", true: "chunked"}[chunked]
		t.Run(name, func(t *testing.T) {
			srv, c := budgetRig(t)
			declared := int64(1 << 20)
			if chunked {
				declared = -1
			}
			// Held with a length, the body's 1 MiB is reserved at once;
			// chunked, as it arrives (so most of it is sent).
			// More than the transport's write buffer, so that the request
			// (headers and all) is flushed to the server, not held.
			send := 64 << 10
			if chunked {
				send = 1<<20 - 1024
			}
			answered, finish := holdBody(t, c, srv.URL, declared, bogusSig, send)
			// The held body's reservation is made once its handler runs
			// (and, chunked, has read what was sent): until then a large
			// body fits and is refused for its signature. Ask until the
			// budget is seen full (bounded by the test's timeout, not by
			// a timing). A probe that came first may have had the room
			// and the held body the 503: then hold another.
			var resp *http.Response
			for {
				select {
				case <-answered:
					answered, finish = holdBody(t, c, srv.URL, declared, bogusSig, send)
				default:
				}
				resp = postLarge(t, c, srv.URL, 600<<10, chunked)
				if resp.StatusCode != http.StatusUnauthorized {
					break
				}
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("a large body beside a held one: answered %d, want 503", resp.StatusCode)
			}
			if got := resp.Header.Get("Retry-After"); got != "7" {
				t.Fatalf("Retry-After %q, want 7", got)
			}
			body := waStatus("wamid.small", "delivered", time.Now().Unix())
			req, _ := http.NewRequest(http.MethodPost, srv.URL+webhook.PathWhatsApp, strings.NewReader(string(body)))
			req.Header.Set("X-Hub-Signature-256", verify.SignWhatsApp(body, []byte(appSecret)))
			r2, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r2.Body.Close()
			if r2.StatusCode != http.StatusOK {
				t.Fatalf("a small signed delivery while the budget is full: answered %d, want 200", r2.StatusCode)
			}
			if code := finish(); code == http.StatusOK {
				t.Fatalf("the held unsigned body was answered 200")
			}
			// The held body's handler gives its reservation back as it
			// returns; on a loaded machine (CI saw it once, chunked) the
			// next probe can still find the budget full. It must be free
			// soon: a reservation never given back would keep every large
			// body out for good.
			for deadline := time.Now().Add(30 * time.Second); ; {
				resp := postLarge(t, c, srv.URL, 600<<10, chunked)
				if resp.StatusCode == http.StatusUnauthorized {
					break
				}
				if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
					t.Fatalf("a large body once the budget is free: answered %d, want 401", resp.StatusCode)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
