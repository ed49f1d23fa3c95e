package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
)

// pgProxy is a TCP proxy in front of the test's PostgreSQL server that
// misbehaves on purpose: it drops the first connections it accepts, and it
// can let one transaction that writes a message commit and then cut the
// connection before the answer reaches the client.
type pgProxy struct {
	t        *testing.T
	ln       net.Listener
	target   string
	accepted atomic.Int32
	refuse   atomic.Int32 // connections still to drop at once
	// loseCommit: the next connection that commits an INSERT INTO
	// messages (a COMMIT after it, or the insert alone when no BEGIN came
	// first) gets it through to the server, and the connection is cut
	// before the server's answer comes back.
	loseCommit atomic.Bool
	lost       atomic.Int32
}

func startProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{t: t, ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *pgProxy) addr() string { return p.ln.Addr().String() }

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if p.refuse.Add(-1) >= 0 {
			c.Close()
			continue
		}
		go p.pipe(c)
	}
}

func (p *pgProxy) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var cut atomic.Bool // set once the COMMIT is on its way: drop the answer
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); server.Close() }) }
	go func() {
		defer closeBoth()
		buf := make([]byte, 64<<10)
		sawInsert, inTx := false, false
		for {
			n, err := client.Read(buf)
			if n > 0 {
				chunk := bytes.ToLower(buf[:n])
				insert := bytes.Contains(chunk, []byte("insert into messages"))
				if bytes.HasPrefix(bytes.TrimSpace(chunk[min(5, len(chunk)):]), []byte("begin")) || bytes.Contains(chunk, []byte("\x00begin")) {
					inTx = true
				}
				sawInsert = sawInsert || insert
				// The transaction's COMMIT after its insert; or an insert
				// outside any transaction (the single-row enqueue is one
				// autocommitted statement), which commits itself.
				commits := (sawInsert && bytes.Contains(chunk, []byte("commit"))) || (insert && !inTx)
				if commits && p.loseCommit.CompareAndSwap(true, false) {
					cut.Store(true)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if cut.Load() {
			// The server has the COMMIT (its answer is here): the row is
			// written, and the client never hears so.
			p.lost.Add(1)
			closeBoth()
			return
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			closeBoth()
			return
		}
	}
}

// viaProxy returns storeURL with its host and port replaced by addr's.
func viaProxy(t *testing.T, storeURL, addr string) string {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// TestSendRetriesALostDatabase: `msgq send` on PostgreSQL retries a
// connection that fails (refused, dropped, or lost with the answer to its
// commit) with backoff for a bounded time, and the key keeps the retry
// from writing twice: a retry after a commit whose answer was lost finds
// the row the first try wrote and replays it. Answers are never retried:
// bad input exits 2 before any connection, a conflict exits 3 at once, a
// missing database exits 1 at once. A database that stays away makes send
// give up with exit 1. Every message keeps the URL's password out.
func TestSendRetriesALostDatabase(t *testing.T) {
	t.Parallel()
	storeURL, schema := pgStore(t, "msgq_retry")
	base := postgresURL(t)
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	// Trust authentication never asks for the password, so a URL can carry
	// one for the test to look for in every message.
	const password = "pw-never-printed"
	u.User = url.UserPassword(u.User.Username(), password)
	withPassword := u.String()
	proxy := startProxy(t, u.Host)
	via := viaProxy(t, withPassword, proxy.addr())
	e := &msgqEnv{t: t, env: []string{"MSGQ_STORE=" + via, "XDG_CONFIG_HOME=" + t.TempDir()}}
	// Migrated beforehand, so that the only transactions through the
	// proxy are the sends'.
	e.run("migrate", "--store", storeURL)
	st, err := postgres.Open(context.Background(), base, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rowsFrom := func(prefix string) int {
		ms, err := st.MessageList(context.Background(), &store.ListParams{Tenant: "default", KeyPrefix: prefix, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		c := e.cmd(args...)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String()+errb.String(), password) {
			t.Errorf("msgq %s printed the password: %s%s", strings.Join(args, " "), out.String(), errb.String())
		}
		return out.String(), errb.String(), code
	}
	send := func(key, text string, extra ...string) []string {
		return append([]string{"send", "--key", key, "--to", "+15551234567", "--text", text, "-o", "json"}, extra...)
	}

	t.Run("refused connections are retried", func(t *testing.T) {
		proxy.refuse.Store(3)
		before := proxy.accepted.Load()
		out, errs, code := run(send("retry-1", "hello")...)
		var r sendOut
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Replayed {
			t.Fatalf("exit %d: %s %s", code, out, errs)
		}
		if got := proxy.accepted.Load() - before; got < 4 {
			t.Errorf("%d connections for a send through 3 refusals", got)
		}
		if !strings.Contains(errs, "store unreachable; retrying") {
			t.Errorf("no retry was reported: %s", errs)
		}
		if n := rowsFrom("retry-1"); n != 1 {
			t.Errorf("%d rows with the key", n)
		}
	})

	t.Run("a commit whose answer was lost is replayed, not written twice", func(t *testing.T) {
		proxy.loseCommit.Store(true)
		lost := proxy.lost.Load()
		out, errs, code := run(send("retry-2", "hello")...)
		var r sendOut
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("exit %d: %s %s", code, out, errs)
		}
		if proxy.lost.Load() == lost {
			t.Fatal("the proxy cut no commit's answer: the test proved nothing")
		}
		// The first try committed; the retry found its row.
		if !r.Replayed || !strings.Contains(errs, "store unreachable; retrying") {
			t.Errorf("replayed %v after a lost commit answer; stderr: %s", r.Replayed, errs)
		}
		if n := rowsFrom("retry-2"); n != 1 {
			t.Errorf("%d rows with the key", n)
		}
		shown, err := st.MessageGet(context.Background(), "default", "retry-2")
		if err != nil || shown.ID != r.ID {
			t.Errorf("send printed %s, the store holds %+v (%v)", r.ID, shown, err)
		}
	})

	t.Run("send --file retries a batch", func(t *testing.T) {
		in := filepath.Join(t.TempDir(), "in.jsonl")
		var lines strings.Builder
		for i := range 5 {
			fmt.Fprintf(&lines, `{"key":"file-%d","to":"+1555000000%d","text":"hi"}`+"\n", i, i)
		}
		writeFile(t, in, lines.String())
		proxy.refuse.Store(2)
		proxy.loseCommit.Store(true)
		out, errs, code := run("send", "--file", in)
		if code != 0 {
			t.Fatalf("exit %d: %s %s", code, out, errs)
		}
		// The lost commit wrote every line: the retry replays them.
		if strings.Count(out, ": replayed file-") != 5 {
			t.Errorf("want 5 replayed lines: %s %s", out, errs)
		}
		for i := range 5 {
			if n := rowsFrom(fmt.Sprintf("file-%d", i)); n != 1 {
				t.Errorf("file-%d: %d rows", i, n)
			}
		}
	})

	t.Run("answers are not retried", func(t *testing.T) {
		before := proxy.accepted.Load()
		_, errs, code := run("send", "--key", "bad one", "--to", "+15551234567", "--text", "hi")
		if code != 2 || proxy.accepted.Load() != before {
			t.Errorf("bad input: exit %d, %d connections: %s", code, proxy.accepted.Load()-before, errs)
		}
		_, errs, code = run("send", "--key", "retry-1", "--to", "+15551234567", "--text", "different")
		if code != 3 || strings.Contains(errs, "retrying") {
			t.Errorf("conflict: exit %d: %s", code, errs)
		}
		missing := strings.Replace(via, "/"+strings.TrimPrefix(u.Path, "/")+"?", "/msgq_no_such_database?", 1)
		_, errs, code = run(append(send("retry-3", "hi"), "--store", missing)...)
		if code != 1 || strings.Contains(errs, "retrying") || !strings.Contains(errs, "3D000") {
			t.Errorf("missing database: exit %d: %s", code, errs)
		}
		if n := rowsFrom("retry-"); n != 2 {
			t.Errorf("%d retry-* rows, want 2", n)
		}
	})

	t.Run("a database that stays away ends in exit 1", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gone := ln.Addr().String()
		ln.Close() // nothing listens there now
		_, errs, code := run(append(send("retry-4", "hi"), "--store", viaProxy(t, withPassword, gone))...)
		if code != 1 || strings.Count(errs, "store unreachable; retrying") < 3 || !strings.Contains(errs, "gave up after") {
			t.Errorf("exit %d: %s", code, errs)
		}
		if last := lastLine(errs); !strings.HasPrefix(last, "msgq: store postgres://postgres:xxxxx@"+gone+"/") {
			t.Errorf("last line %q does not name the store with its password hidden", last)
		}
	})
}
