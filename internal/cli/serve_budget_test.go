package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sendOfSize is a valid single send whose JSON is exactly n bytes: a
// text of x's.
func sendOfSize(n int) string {
	head, tail := `{"to":"+15551234567","identity":"sim","text":"`, `"}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// rawConn is a connection to serve written to by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// rawRequest opens a connection to serve and writes a request's head
// and the first part of its body, no more: what serve answers then, it
// answered without the rest.
func rawRequest(t *testing.T, base, head string, body []byte) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// answer reads the response on c (within a bound: a server waiting for
// the rest of the body never answers).
func answer(t *testing.T, c *rawConn, what string) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("%s: no answer before the rest of the body was sent: %v", what, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(raw)
}

// chunk is b as one chunk of a chunked body (b is not changed).
func chunk(b []byte) []byte {
	c := fmt.Appendf(nil, "%x\r\n", len(b))
	return append(append(c, b...), "\r\n"...)
}

// TestServeRefusesBodiesUnread: against a real `msgq serve` on both
// stores with a small budget, each refusal comes before the body is read
// in full: the client has sent only part of it when the answer arrives.
// A send over --max-body is 413 by its Content-Length (and, chunked, once
// it passes the limit); a batch is held to --max-batch-body instead; while
// one large send holds the budget, another is 503 busy with Retry-After
// by its Content-Length (and, chunked, as it outgrows the room left), and
// a small send still goes through; once the large one is done, the room is
// back.
func TestServeRefusesBodiesUnread(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		env := newAPIEnv(t, kind)
		const mib = 1 << 20
		_, base := startAPI(t, env.e, "--max-body", strconv.Itoa(mib), "--max-batch-body", strconv.Itoa(mib+mib/2), "--max-pending", strconv.Itoa(2*mib))
		auth := "Authorization: Bearer " + env.shop + "\r\n"
		post := func(path, key string, length int, extra ...string) string {
			h := "POST " + path + " HTTP/1.1\r\nHost: msgq\r\n" + auth + "Content-Type: application/json\r\n"
			if key != "" {
				h += "Idempotency-Key: " + key + "\r\n"
			}
			for _, x := range extra {
				h += x + "\r\n"
			}
			if length < 0 {
				return h + "Transfer-Encoding: chunked\r\n\r\n"
			}
			return h + "Content-Length: " + strconv.Itoa(length) + "\r\n\r\n"
		}
		refused := func(what string, c *rawConn, status int, code string) *http.Response {
			t.Helper()
			resp, raw := answer(t, c, what)
			if resp.StatusCode != status || !strings.Contains(raw, `"code":"`+code+`"`) {
				t.Fatalf("%s: %d %s; want %d %s", what, resp.StatusCode, raw, status, code)
			}
			return resp
		}
		accepted := func(what string, c *rawConn) {
			t.Helper()
			if resp, raw := answer(t, c, what); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: %d %s; want 202", what, resp.StatusCode, raw)
			}
		}

		// 413 by Content-Length: not a byte of the body sent.
		refused("a send declaring --max-body + 1", rawRequest(t, base, post("/v1/messages", "big-1", mib+1), nil), 413, "body_too_large")
		// A batch has its own limit: 1.25 MiB is read (and, being
		// spaces, refused as not JSON), 1.5 MiB + 1 is not.
		refused("a batch declaring --max-batch-body + 1", rawRequest(t, base, post("/v1/messages/batch", "", mib+mib/2+1), nil), 413, "body_too_large")
		c := rawRequest(t, base, post("/v1/messages/batch", "", mib+mib/4), bytes.Repeat([]byte(" "), mib+mib/4))
		refused("a batch of 1.25 MiB of spaces", c, 400, "malformed_json")
		// Chunked past --max-body: refused with the body still open.
		c = rawRequest(t, base, post("/v1/messages", "big-2", -1), chunk(bytes.Repeat([]byte("x"), mib+64<<10)))
		refused("a chunked send past --max-body", c, 413, "body_too_large")

		// One large send holds 1 MiB of the budget (2 MiB, of which an
		// eighth is kept for small bodies) while its body is incomplete.
		// It asks for 100 Continue, which serve sends when it starts
		// reading the body: after it has reserved the room.
		large := []byte(sendOfSize(mib))
		held := rawRequest(t, base, post("/v1/messages", "large-1", len(large), "Expect: 100-continue"), nil)
		_ = held.SetReadDeadline(time.Now().Add(30 * time.Second))
		if resp, err := http.ReadResponse(held.r, nil); err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("a large send asking for 100 Continue: %v %v", resp, err)
		}
		if _, err := held.Write(large[:mib/2]); err != nil {
			t.Fatal(err)
		}
		// Another large one does not fit: 503 with Retry-After, unread.
		resp := refused("a second large send while the budget is held", rawRequest(t, base, post("/v1/messages", "large-2", len(large)), nil), 503, "busy")
		if resp.Header.Get("Retry-After") == "" {
			t.Fatalf("503 busy without Retry-After: %v", resp.Header)
		}
		// Chunked, it is refused as it outgrows the room left (under
		// 1 MiB), with its body still open.
		c = rawRequest(t, base, post("/v1/messages", "large-3", -1), chunk(large[:mib-mib/8]))
		refused("a chunked large send while the budget is held", c, 503, "busy")
		// A small send still fits.
		small := `{"to":"+15551234567","identity":"sim","text":"hi"}`
		accepted("a small send while a large one holds the budget", rawRequest(t, base, post("/v1/messages", "small-1", len(small)), []byte(small)))
		// The held send completes; then the second large one fits.
		if _, err := held.Write(large[mib/2:]); err != nil {
			t.Fatal(err)
		}
		accepted("the held send, completed", held)
		accepted("the second large send once the budget is free", rawRequest(t, base, post("/v1/messages", "large-2", len(large)), large))
		st := env.b.watch(t)
		for _, key := range []string{"large-1", "large-2", "small-1"} {
			if _, err := st.MessageGet(context.Background(), "shop", key); err != nil {
				t.Fatalf("%s was answered 202: %v", key, err)
			}
		}
		for _, key := range []string{"big-1", "big-2", "large-3"} {
			if _, err := st.MessageGet(context.Background(), "shop", key); err == nil {
				t.Fatalf("%s was refused but is stored", key)
			}
		}
	})
}
