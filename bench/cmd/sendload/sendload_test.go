package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const testKey = "msgq_test_secret_0123456789"

// stub is a real HTTP server that speaks the part of msgq serve's contract
// (docs/api.md) the generator uses: POST /v1/messages answering 202 for a
// new key, GET /v1/messages?key=K, GET /v1/openapi.json. Its knobs make it
// answer other codes, forget writes or stall, by sequence number.
type stub struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	bodies map[string][]byte // key -> body, what was "stored"
	posts  int
	// connections: open now, the most open at once, opened in all
	open, maxOpen, dialed int
	answer                func(seq int) (int, string)
	forget                func(seq int) bool
	stall                 func(seq int) time.Duration
	// hangUp: on a key's first request, close the connection without an
	// answer, after storing the row (landed) or before.
	hangUp  func(seq int) (hang, landed bool)
	hungUp  map[string]bool
	badAuth int
}

func newStub(t *testing.T) *stub {
	s := &stub{t: t, bodies: map[string][]byte{},
		answer: func(int) (int, string) { return 202, "" },
		forget: func(int) bool { return false },
		stall:  func(int) time.Duration { return 0 },
		hangUp: func(int) (bool, bool) { return false, false },
		hungUp: map[string]bool{},
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.open++
			s.dialed++
			s.maxOpen = max(s.maxOpen, s.open)
		case http.StateClosed, http.StateHijacked:
			s.open--
		}
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stub) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/openapi.json" {
		w.Write([]byte(`{"openapi":"3.1.0"}`))
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testKey {
		s.mu.Lock()
		s.badAuth++
		s.mu.Unlock()
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, `{"code":"unauthorized","message":"no valid API key"}`, 401)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		key := r.Header.Get("Idempotency-Key")
		body, _ := io.ReadAll(r.Body)
		seq, err := strconv.Atoi(key[strings.LastIndex(key, "-")+1:])
		if err != nil || !json.Valid(body) {
			http.Error(w, `{"code":"bad_request"}`, 400)
			return
		}
		time.Sleep(s.stall(seq))
		code, msg := s.answer(seq)
		s.mu.Lock()
		s.posts++
		if hang, landed := s.hangUp(seq); hang && !s.hungUp[key] {
			s.hungUp[key] = true
			if landed {
				s.bodies[key] = body
			}
			s.mu.Unlock()
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		if old, dup := s.bodies[key]; dup && bytes.Equal(old, body) {
			w.Header().Set("Idempotent-Replayed", "true")
			code, msg = 200, ""
		} else if dup {
			code, msg = 409, `{"code":"idempotency_key_reused"}`
		} else if code == 202 && !s.forget(seq) {
			s.bodies[key] = body
		}
		s.mu.Unlock()
		w.WriteHeader(code)
		if msg == "" {
			msg = fmt.Sprintf(`{"id":"m%d","key":%q,"state":"queued"}`, seq, key)
		}
		w.Write([]byte(msg))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/messages":
		key := r.URL.Query().Get("key")
		s.mu.Lock()
		_, ok := s.bodies[key]
		s.mu.Unlock()
		if !ok {
			http.Error(w, `{"code":"not_found"}`, 404)
			return
		}
		fmt.Fprintf(w, `{"id":"x","key":%q,"state":"queued","history":[]}`, key)
	default:
		http.NotFound(w, r)
	}
}

// sendload runs the command as main does, with the key in an env var.
func sendload(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Setenv("SENDLOAD_TEST_KEY", testKey)
	var out, errb bytes.Buffer
	code = mainErr(append([]string{"--key", "env:SENDLOAD_TEST_KEY"}, args...), &out, &errb)
	if strings.Contains(out.String()+errb.String(), testKey) {
		t.Fatalf("the API key was printed:\n%s\n%s", out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

func decode(t *testing.T, s string) report {
	t.Helper()
	var r report
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("-o json output: %v\n%s", err, s)
	}
	return r
}

func TestEveryRequestAcceptedAndVerifiedIsGood(t *testing.T) {
	s := newStub(t)
	code, out, errs := sendload(t, "--url", s.srv.URL, "--connections", "8", "--requests", "500",
		"--key-prefix", "good", "--verify", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errs)
	}
	r := decode(t, out)
	if !r.Good || r.Sent != 500 || r.Accepted != 500 || r.Non202 != 0 || r.Errors != 0 ||
		!maps.Equal(r.Statuses, map[string]int{"202": 500}) {
		t.Fatalf("report %+v", r)
	}
	if r.Verify == nil || r.Verify.Checked != 500 || r.Verify.Present != 500 || r.Verify.Missing != 0 || r.Verify.Errors != 0 {
		t.Fatalf("verify %+v", r.Verify)
	}
	if r.LatencyMS.P50 > r.LatencyMS.P90 || r.LatencyMS.P90 > r.LatencyMS.P99 || r.LatencyMS.P99 > r.LatencyMS.Max || r.LatencyMS.Max <= 0 {
		t.Fatalf("latency percentiles out of order: %+v", r.LatencyMS)
	}
	if r.AcceptedPerS <= 0 || r.ElapsedS <= 0 {
		t.Fatalf("rate %v over %v s", r.AcceptedPerS, r.ElapsedS)
	}

	// Each request had its own key and its own recipient, in the body the
	// template gave, and the 8 connections were kept alive.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.posts != 500 || len(s.bodies) != 500 {
		t.Fatalf("the server saw %d posts, %d keys", s.posts, len(s.bodies))
	}
	tos := map[string]bool{}
	for i := 1; i <= 500; i++ {
		key := "good-" + strconv.Itoa(i)
		var b struct {
			To       string `json:"to"`
			Identity string `json:"identity"`
			Template struct {
				Name       string   `json:"name"`
				Parameters []string `json:"parameters"`
			} `json:"template"`
		}
		if err := json.Unmarshal(s.bodies[key], &b); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		want := fmt.Sprintf("+1555%07d", i)
		if b.To != want || b.Identity != "sim" || b.Template.Name != "order_update" || !slices.Equal(b.Template.Parameters, []string{"Ada", strconv.Itoa(i)}) {
			t.Fatalf("%s: body %s, want to %s", key, s.bodies[key], want)
		}
		tos[b.To] = true
	}
	if len(tos) != 500 {
		t.Fatalf("%d distinct recipients", len(tos))
	}
	// Kept alive: far fewer connections opened than requests made. (How
	// many are open at once is MaxConnsPerHost's to keep; the server sees
	// a replaced connection's close late, so it counts 9 at times.)
	t.Logf("%d connections opened, at most %d open at once as the server saw it", s.dialed, s.maxOpen)
	if s.dialed >= 100 {
		t.Fatalf("%d connections opened for 500 requests: not kept alive", s.dialed)
	}
}

func TestAnyNon202MakesTheRunNotGoodAndIsPrinted(t *testing.T) {
	s := newStub(t)
	s.answer = func(seq int) (int, string) {
		switch {
		case seq%50 == 0:
			return 500, `{"code":"internal","message":"boom"}`
		case seq == 7:
			return 422, `{"code":"invalid_to","field":"to","message":"not a number"}`
		}
		return 202, ""
	}
	code, out, errs := sendload(t, "--url", s.srv.URL, "--connections", "4", "--requests", "200", "--key-prefix", "bad", "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, errs)
	}
	r := decode(t, out)
	if r.Good || r.Accepted != 195 || r.Non202 != 5 || !maps.Equal(r.Statuses, map[string]int{"202": 195, "500": 4, "422": 1}) {
		t.Fatalf("report %+v", r)
	}
	for _, want := range []string{"NOT good", "5 answers were not 202", "bad-7: 422", "invalid_to", "bad-50: 500", "boom"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}

	// The table says so too.
	s2 := newStub(t)
	s2.answer = func(seq int) (int, string) {
		if seq == 3 {
			return 503, `{"code":"store_unavailable"}`
		}
		return 202, ""
	}
	code, out, _ = sendload(t, "--url", s2.srv.URL, "--connections", "2", "--requests", "10", "--key-prefix", "t")
	if code != 1 || !strings.Contains(out, "result        NOT good: 1 answers were not 202") || !strings.Contains(out, "202 x9, 503 x1") {
		t.Fatalf("exit %d, table:\n%s", code, out)
	}
}

func TestVerifyCountsAcknowledgedKeysThatAreMissing(t *testing.T) {
	s := newStub(t)
	s.forget = func(seq int) bool { return seq%10 == 3 } // a 202 whose row was lost
	code, out, errs := sendload(t, "--url", s.srv.URL, "--connections", "4", "--requests", "100", "--key-prefix", "lost", "--verify", "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	r := decode(t, out)
	if r.Accepted != 100 || r.Verify == nil || r.Verify.Checked != 100 || r.Verify.Present != 90 || r.Verify.Missing != 10 || r.Verify.Errors != 0 {
		t.Fatalf("report %+v verify %+v", r, r.Verify)
	}
	if r.Good || !strings.Contains(errs, "10 acknowledged keys are missing") || !strings.Contains(errs, "lost-3: acknowledged 202, not found") {
		t.Fatalf("good %v, stderr:\n%s", r.Good, errs)
	}

	// A sample reads that many keys, the first and the last among them.
	code, out, _ = sendload(t, "--url", s.srv.URL, "--connections", "4", "--requests", "100", "--key-prefix", "lost2",
		"--verify", "--verify-sample", "12", "-o", "json")
	r = decode(t, out)
	if r.Verify.Checked != 12 || r.Verify.Present+r.Verify.Missing != 12 {
		t.Fatalf("exit %d, verify %+v", code, r.Verify)
	}
	if got := pick([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 4); !slices.Equal(got, []int64{1, 4, 7, 10}) {
		t.Fatalf("pick: %v", got)
	}
}

// A failed connection is an error, not an answer: the server is gone.
func TestRequestsWithoutAnAnswerAreErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close() // hang up before answering
		}
	}()
	t.Cleanup(func() { l.Close() })
	code, out, errs := sendload(t, "--url", "http://"+l.Addr().String(), "--connections", "2", "--requests", "6", "--key-prefix", "gone", "-o", "json")
	r := decode(t, out)
	if code != 1 || r.Good || r.Errors != 6 || r.Accepted != 0 || !strings.Contains(errs, "6 requests failed without an answer") {
		t.Fatalf("exit %d report %+v\n%s", code, r, errs)
	}
}

// A client that retries with its key through lost answers: a request
// whose first try landed is answered 200 Idempotent-Replayed, one whose
// first try did not is answered 202, and both are acknowledged.
func TestRetryWithTheSameKeyAfterNoAnswer(t *testing.T) {
	s := newStub(t)
	s.hangUp = func(seq int) (bool, bool) { return seq%10 == 0, seq%20 == 0 }
	code, out, errs := sendload(t, "--url", s.srv.URL, "--connections", "4", "--requests", "100", "--key-prefix", "re",
		"--retry", "10s", "--verify", "-o", "json")
	r := decode(t, out)
	if code != 0 || !r.Good || r.Accepted != 95 || r.ReplayedAfterRetry != 5 || r.Retries != 10 || r.Non202 != 0 || r.Errors != 0 ||
		!maps.Equal(r.Statuses, map[string]int{"202": 95, "200": 5}) || r.Verify.Present != 100 {
		t.Fatalf("exit %d report %+v verify %+v\n%s", code, r, r.Verify, errs)
	}

	// Without --retry those are errors, and a replay nobody asked for is
	// not an acknowledgement.
	s2 := newStub(t)
	s2.hangUp = func(seq int) (bool, bool) { return seq%10 == 0, false }
	code, out, errs = sendload(t, "--url", s2.srv.URL, "--connections", "4", "--requests", "100", "--key-prefix", "re", "-o", "json")
	r = decode(t, out)
	if code != 1 || r.Good || r.Errors != 10 || r.Accepted != 90 || !strings.Contains(errs, "10 requests failed without an answer") {
		t.Fatalf("exit %d report %+v\n%s", code, r, errs)
	}
	code, out, _ = sendload(t, "--url", s2.srv.URL, "--connections", "4", "--requests", "5", "--key-prefix", "re", "-o", "json")
	r = decode(t, out)
	if code != 1 || r.Non202 != 5 || r.ReplayedAfterRetry != 0 || r.Statuses["200"] != 5 {
		t.Fatalf("a second run with the same prefix: exit %d report %+v", code, r)
	}
}

// Latency is measured around the whole request: a server that takes at
// least 25 ms on a quarter of the requests gives a p90 and a p99 of at
// least that (a lower bound, so no timing can make this flaky).
func TestSlowAnswersShowInTheUpperPercentiles(t *testing.T) {
	s := newStub(t)
	s.stall = func(seq int) time.Duration {
		if seq%4 == 0 {
			return 25 * time.Millisecond
		}
		return 0
	}
	code, out, _ := sendload(t, "--url", s.srv.URL, "--connections", "4", "--requests", "200", "--key-prefix", "slow", "-o", "json")
	r := decode(t, out)
	if code != 0 || r.LatencyMS.P90 < 25 || r.LatencyMS.P99 < 25 || r.LatencyMS.Max < 25 {
		t.Fatalf("exit %d latency %+v", code, r.LatencyMS)
	}
}

func TestDurationModeSendsUntilTheDeadline(t *testing.T) {
	s := newStub(t)
	code, out, errs := sendload(t, "--url", s.srv.URL, "--connections", "3", "--duration", "200ms", "--key-prefix", "dur", "--verify", "-o", "json")
	r := decode(t, out)
	if code != 0 || !r.Good || r.Sent == 0 || r.Accepted != r.Sent || r.Verify.Present != int(r.Accepted) {
		t.Fatalf("exit %d report %+v\n%s", code, r, errs)
	}
}

func TestTheKeyComesFromAFileAndAWrongKeyIs401(t *testing.T) {
	s := newStub(t)
	f := filepath.Join(t.TempDir(), "key")
	os.WriteFile(f, []byte(testKey+"\n"), 0o600)
	var out, errb bytes.Buffer
	if code := mainErr([]string{"--key", "file:" + f, "--url", s.srv.URL, "--requests", "5", "--key-prefix", "f"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	os.WriteFile(f, []byte("msgq_wrong_key\n"), 0o600)
	out.Reset()
	errb.Reset()
	code := mainErr([]string{"--key", "file:" + f, "--url", s.srv.URL, "--requests", "5", "--key-prefix", "f2"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "f2-1: 401") || strings.Contains(out.String()+errb.String(), "msgq_wrong_key") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
}

func TestBadFlagsAreRefusedBeforeAnythingIsSent(t *testing.T) {
	s := newStub(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--requests", "1"}, "--url is required"},
		{[]string{"--url", s.srv.URL}, "give exactly one of --requests N and --duration D"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--duration", "1s"}, "give exactly one"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--key-prefix", "has space"}, "--key-prefix"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--key-prefix", strings.Repeat("k", 63)}, "not 1 to 64 characters"},
		{[]string{"--url", s.srv.URL, "--requests", "101", "--to", "+1555555##"}, "gives 100 distinct numbers"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--to", "+15551234567"}, "has no #"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--body", `{"to":`}, "not JSON"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--key", testKey}, "want env:NAME or file:PATH"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "--key", "env:SENDLOAD_UNSET_VAR"}, "empty or unset"},
		{[]string{"--url", s.srv.URL, "--requests", "1", "-o", "yaml"}, "want table or json"},
		{[]string{"--url", "localhost:8080", "--requests", "1"}, "want http:// or https://"},
	} {
		code, _, errs := sendload(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.posts != 0 || s.badAuth != 0 {
		t.Fatalf("%d posts reached the server", s.posts)
	}
}

func TestBodyTemplateAndRecipientPattern(t *testing.T) {
	b := compileBody(`{"k":"{{key}}","n":{{seq}},"to":"{{to}}","x":"{{other}}"}`).render(nil, 42, "p-42", fillTo("+1555#######", 42))
	if string(b) != `{"k":"p-42","n":42,"to":"+15550000042","x":"{{other}}"}` {
		t.Fatalf("%s", b)
	}
	if got := fillTo("+44 7700 9#####", 1234567); got != "+44 7700 934567" {
		t.Fatalf("%s", got)
	}
}

// The histogram's quantiles are within its bucket width (1/128) of the
// exact nearest-rank quantile of the same samples, at every magnitude.
func TestHistogramQuantilesMatchSortedSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, scale := range []time.Duration{time.Microsecond, time.Millisecond, time.Second} {
		var h, part histogram
		var all []time.Duration
		for i := range 20000 {
			// Log-uniform over three decades, like real latency tails.
			d := time.Duration(float64(scale) * math.Pow(10, rng.Float64()*3))
			all = append(all, d)
			if i%2 == 0 {
				h.record(d)
			} else {
				part.record(d)
			}
		}
		h.merge(&part)
		slices.Sort(all)
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
			exact := all[int(math.Ceil(q*float64(len(all))-1e-9))-1]
			got := h.quantile(q)
			if got < exact || float64(got-exact) > float64(exact)/128+1 {
				t.Errorf("scale %v q %v: %v, exact %v", scale, q, got, exact)
			}
		}
		if time.Duration(h.max) != all[len(all)-1] || h.total != 20000 {
			t.Errorf("max %v total %d", time.Duration(h.max), h.total)
		}
	}
	// Small values are exact; p99 of 1..100 is 99, p50 is 50.
	var h histogram
	for i := 1; i <= 100; i++ {
		h.record(time.Duration(i))
	}
	if h.quantile(0.5) != 50 || h.quantile(0.99) != 99 || h.quantile(1) != 100 {
		t.Fatalf("p50 %d p99 %d p100 %d", h.quantile(0.5), h.quantile(0.99), h.quantile(1))
	}
	for v := int64(0); v < 1<<20; v += 7 {
		if i := bucketOf(v); bucketHigh(i) < v || (i > 0 && bucketHigh(i-1) >= v) {
			t.Fatalf("value %d in bucket %d [.., %d]", v, i, bucketHigh(i))
		}
	}
}
