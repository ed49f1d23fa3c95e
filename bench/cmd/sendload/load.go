package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// options is one run of the generator; main fills it from flags and
// Validate checks it before anything is sent.
type options struct {
	URL         string
	KeySource   string // env:NAME or file:PATH; the key itself never reaches a flag, a log or the output
	apiKey      string
	Connections int
	Requests    int           // total sends; 0 with Duration set
	Duration    time.Duration // how long new sends start; 0 with Requests set
	KeyPrefix   string
	ToPattern   string
	Body        string // template, or @FILE
	Timeout     time.Duration
	Wait        time.Duration // how long to wait for the server to answer before the run
	Verify      bool
	VerifyMax   int           // keys verified: 0 is every acknowledged key
	VerifyWait  time.Duration // how long a verification read retries a refused connection or a 503 (a restarting server)
	Retry       time.Duration // how long a request without an answer is sent again with its key
	Samples     int           // non-202 answers and errors kept to print
}

// defaultBody is a template send to msgq's built-in simulator identity.
const defaultBody = `{"to":"{{to}}","identity":"sim","template":{"name":"order_update","language":"en","parameters":["Ada","{{seq}}"]}}`

// keyGrammar is --key's grammar in msgq send (internal/cli/cmd_send.go),
// which the API's Idempotency-Key shares.
var keyGrammar = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

func (o *options) Validate() error {
	if o.URL == "" {
		return errors.New("--url is required (the server's base URL, e.g. http://127.0.0.1:8080)")
	}
	o.URL = strings.TrimRight(o.URL, "/")
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return fmt.Errorf("--url %q: want http:// or https://", o.URL)
	}
	if o.Connections < 1 {
		return errors.New("--connections must be at least 1")
	}
	if (o.Requests > 0) == (o.Duration > 0) {
		return errors.New("give exactly one of --requests N and --duration D")
	}
	if o.Requests < 0 {
		return errors.New("--requests must be positive")
	}
	// The longest key the run makes must still fit the grammar.
	last := o.Requests
	if last == 0 {
		last = 1 << 40
	}
	if k := o.KeyPrefix + "-" + strconv.Itoa(last); !keyGrammar.MatchString(k) {
		return fmt.Errorf("--key-prefix %q: keys like %q are not 1 to 64 characters of A-Za-z0-9._:-", o.KeyPrefix, k)
	}
	digits := strings.Count(o.ToPattern, "#")
	if digits == 0 {
		return fmt.Errorf("--to %q has no # to fill with the sequence number", o.ToPattern)
	}
	if o.Requests > 0 && digits < 19 && float64(o.Requests) > pow10(digits) {
		return fmt.Errorf("--to %q gives %d distinct numbers, fewer than --requests %d", o.ToPattern, int64(pow10(digits)), o.Requests)
	}
	if strings.HasPrefix(o.Body, "@") {
		b, err := os.ReadFile(o.Body[1:])
		if err != nil {
			return fmt.Errorf("--body: %w", err)
		}
		o.Body = string(b)
	}
	if o.Body == "" {
		o.Body = defaultBody
	}
	if b := compileBody(o.Body).render(nil, 1, o.KeyPrefix+"-1", fillTo(o.ToPattern, 1)); !json.Valid(b) {
		return fmt.Errorf("--body: the first request's body is not JSON: %s", b)
	}
	key, err := readKey(o.KeySource)
	if err != nil {
		return err
	}
	o.apiKey = key
	return nil
}

func pow10(n int) float64 {
	f := 1.0
	for range n {
		f *= 10
	}
	return f
}

// readKey reads the API key from env:NAME or file:PATH (its first line),
// so that it never appears in a process list or a shell history.
func readKey(src string) (string, error) {
	kind, arg, ok := strings.Cut(src, ":")
	var key string
	switch {
	case ok && kind == "env":
		key = os.Getenv(arg)
		if key == "" {
			return "", fmt.Errorf("--key %s: the variable %s is empty or unset", src, arg)
		}
	case ok && kind == "file":
		b, err := os.ReadFile(arg)
		if err != nil {
			return "", fmt.Errorf("--key: %w", err)
		}
		key, _, _ = strings.Cut(string(b), "\n")
		key = strings.TrimSpace(key)
		if key == "" {
			return "", fmt.Errorf("--key %s: the file is empty", src)
		}
	default:
		// Not echoed: a key given by mistake must not reach a log.
		return "", errors.New("--key: want env:NAME or file:PATH (the key itself is never a flag)")
	}
	return key, nil
}

// fillTo replaces the pattern's #s with seq's last digits, zero-padded:
// "+1555#######" and 42 give +15550000042.
func fillTo(pattern string, seq int64) string {
	b := []byte(pattern)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '#' {
			b[i] = byte('0' + seq%10)
			seq /= 10
		}
	}
	return string(b)
}

// bodyTemplate is the --body text cut at its placeholders ({{seq}},
// {{key}}, {{to}}), so that each request's body is a few appends.
type bodyTemplate []bodyPart

type bodyPart struct {
	lit string
	ph  string // "", "seq", "key" or "to"
}

func compileBody(s string) bodyTemplate {
	var t bodyTemplate
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(s[i:], "}}")
		if j < 0 {
			break
		}
		name := s[i+2 : i+j]
		switch name {
		case "seq", "key", "to":
			t = append(t, bodyPart{lit: s[:i]}, bodyPart{ph: name})
		default:
			t = append(t, bodyPart{lit: s[:i+j+2]})
		}
		s = s[i+j+2:]
	}
	return append(t, bodyPart{lit: s})
}

func (t bodyTemplate) render(dst []byte, seq int64, key, to string) []byte {
	dst = dst[:0]
	for _, p := range t {
		switch p.ph {
		case "":
			dst = append(dst, p.lit...)
		case "seq":
			dst = strconv.AppendInt(dst, seq, 10)
		case "key":
			dst = append(dst, key...)
		case "to":
			dst = append(dst, to...)
		}
	}
	return dst
}

// sample is one non-202 answer or transport error kept for the report.
type sample struct {
	Key    string `json:"key"`
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
	Error  string `json:"error,omitempty"`
}

// report is the run's result; its JSON field names are stable for scripts.
type report struct {
	URL          string         `json:"url"`
	Connections  int            `json:"connections"`
	Sent         int64          `json:"sent"`
	ElapsedS     float64        `json:"elapsed_s"`
	Accepted     int64          `json:"accepted"`
	AcceptedPerS float64        `json:"accepted_per_s"`
	Statuses     map[string]int `json:"statuses"`
	Non202       int64          `json:"non_202"`
	Errors       int64          `json:"errors"`
	// With --retry: requests sent again after no answer, and retries
	// answered 200 Idempotent-Replayed (acknowledged, not counted in
	// non_202).
	Retries            int64         `json:"retries"`
	ReplayedAfterRetry int64         `json:"replayed_after_retry"`
	LatencyMS          latency       `json:"latency_ms"`
	Samples            []sample      `json:"samples"`
	Verify             *verifyReport `json:"verify,omitempty"`
	Good               bool          `json:"good"`
	NotGood            []string      `json:"not_good,omitempty"`
}

type latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// worker is one connection's goroutine and what it saw; nothing in it is
// shared until the run is over.
type worker struct {
	hist     histogram
	statuses map[int]int
	errors   int64
	retries  int64 // requests sent again after no answer (--retry)
	// answers 200 Idempotent-Replayed to a retry: the first try had landed
	replayedAfterRetry int64
	acked              []int64 // sequence numbers answered 202
	samples            []sample
}

func newTransport(n int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxConnsPerHost:     n,
		MaxIdleConnsPerHost: n,
		MaxIdleConns:        n,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// HTTP/1.1 keep-alive: N connections, one request at a time on each,
		// is the load an application's pool of N gives.
		ForceAttemptHTTP2: false,
	}
}

// waitReady polls GET /v1/openapi.json until the server answers anything.
func waitReady(ctx context.Context, c *http.Client, base string, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/openapi.json", nil)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s did not answer within %s: %w", base, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// send posts one request and counts its answer. With --retry, a request
// that got no answer (the server was killed, a connection reset) is sent
// again with the same key and body, as a client that retries with its key
// does; its answer then is 202 (the first never landed) or 200 with
// Idempotent-Replayed (it had), and either acknowledges the key.
func (w *worker) send(ctx context.Context, client *http.Client, o *options, endpoint, auth string, seq int64, key string, body []byte) {
	first := time.Now()
	for try := 1; ; try++ {
		// The request is not tied to ctx: one already sent is finished, so
		// its answer (and its key) is counted.
		req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
		if err != nil {
			panic(err) // the URL was checked
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		// net/http takes a request with an Idempotency-Key for idempotent
		// and silently sends it again when a kept-alive connection dies
		// before the answer, which would hide a lost answer from the count
		// (and --retry's). Without GetBody it cannot rewind the body, so it
		// does not.
		req.GetBody = nil
		t0 := time.Now()
		resp, err := client.Do(req)
		var answer []byte
		if err == nil {
			if resp.StatusCode == http.StatusAccepted {
				_, err = io.Copy(io.Discard, resp.Body)
			} else {
				answer, err = io.ReadAll(io.LimitReader(resp.Body, 1<<16))
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			if err != nil {
				// The answer was cut off: it is not an acknowledgement.
				err = fmt.Errorf("reading the %d answer: %w", resp.StatusCode, err)
			}
		}
		took := time.Since(t0)
		if err != nil {
			if o.Retry > 0 && ctx.Err() == nil && time.Since(first) < o.Retry {
				w.retries++
				time.Sleep(50 * time.Millisecond)
				continue
			}
			w.errors++
			if len(w.samples) < o.Samples {
				w.samples = append(w.samples, sample{Key: key, Error: err.Error()})
			}
			// A refused connection fails at once: do not spin on it.
			time.Sleep(10 * time.Millisecond)
			return
		}
		w.hist.record(took)
		w.statuses[resp.StatusCode]++
		switch {
		case resp.StatusCode == http.StatusAccepted:
			w.acked = append(w.acked, seq)
		case try > 1 && resp.StatusCode == http.StatusOK && resp.Header.Get("Idempotent-Replayed") == "true":
			w.replayedAfterRetry++
			w.acked = append(w.acked, seq)
		case len(w.samples) < o.Samples:
			w.samples = append(w.samples, sample{Key: key, Status: resp.StatusCode, Body: strings.TrimSpace(string(answer))})
		}
		return
	}
}

// run sends the load and, with Verify, reads back the acknowledged keys.
// Cancelling ctx stops new sends; requests already sent finish.
func run(ctx context.Context, o *options) (*report, error) {
	tr := newTransport(o.Connections)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout}
	if o.Wait > 0 {
		if err := waitReady(ctx, client, o.URL, o.Wait); err != nil {
			return nil, err
		}
	}
	tmpl := compileBody(o.Body)
	endpoint := o.URL + "/v1/messages"
	auth := "Bearer " + o.apiKey

	var next atomic.Int64
	workers := make([]*worker, o.Connections)
	var wg sync.WaitGroup
	start := time.Now()
	var stopAt time.Time
	if o.Duration > 0 {
		stopAt = start.Add(o.Duration)
	}
	for i := range workers {
		w := &worker{statuses: map[int]int{}}
		workers[i] = w
		wg.Go(func() {
			var buf []byte
			for ctx.Err() == nil {
				if !stopAt.IsZero() && time.Now().After(stopAt) {
					return
				}
				seq := next.Add(1)
				if o.Requests > 0 && seq > int64(o.Requests) {
					return
				}
				key := o.KeyPrefix + "-" + strconv.FormatInt(seq, 10)
				buf = tmpl.render(buf, seq, key, fillTo(o.ToPattern, seq))
				w.send(ctx, client, o, endpoint, auth, seq, key, buf)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	r := &report{URL: o.URL, Connections: o.Connections, ElapsedS: elapsed.Seconds(), Statuses: map[string]int{}, Samples: []sample{}}
	var h histogram
	var acked []int64
	for _, w := range workers {
		h.merge(&w.hist)
		for code, n := range w.statuses {
			r.Statuses[strconv.Itoa(code)] += n
			r.Sent += int64(n)
			if code == http.StatusAccepted {
				r.Accepted += int64(n)
			} else {
				r.Non202 += int64(n)
			}
		}
		r.Errors += w.errors
		r.Retries += w.retries
		r.ReplayedAfterRetry += w.replayedAfterRetry
		r.Non202 -= w.replayedAfterRetry
		r.Sent += w.errors
		acked = append(acked, w.acked...)
		r.Samples = append(r.Samples, w.samples...)
	}
	if len(r.Samples) > o.Samples {
		r.Samples = r.Samples[:o.Samples]
	}
	r.AcceptedPerS = float64(r.Accepted) / elapsed.Seconds()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r.LatencyMS = latency{P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)), Max: ms(time.Duration(h.max))}

	if o.Verify {
		sort.Slice(acked, func(i, j int) bool { return acked[i] < acked[j] })
		r.Verify = verify(client, o, pick(acked, o.VerifyMax))
	}
	r.judge()
	return r, nil
}

// judge decides whether the run is good: every request answered 202, and
// every acknowledged key verified present. Anything else is named.
func (r *report) judge() {
	r.NotGood = nil
	if r.Accepted == 0 {
		r.NotGood = append(r.NotGood, "nothing was accepted")
	}
	if r.Non202 > 0 {
		r.NotGood = append(r.NotGood, fmt.Sprintf("%d answers were not 202", r.Non202))
	}
	if r.Errors > 0 {
		r.NotGood = append(r.NotGood, fmt.Sprintf("%d requests failed without an answer", r.Errors))
	}
	if v := r.Verify; v != nil {
		if v.Missing > 0 {
			r.NotGood = append(r.NotGood, fmt.Sprintf("%d acknowledged keys are missing", v.Missing))
		}
		if v.Errors > 0 {
			r.NotGood = append(r.NotGood, fmt.Sprintf("%d keys could not be verified", v.Errors))
		}
	}
	r.Good = len(r.NotGood) == 0
}

// pick is every acked sequence number, or n of them evenly spread over
// the run (the first and the last included), so a sample covers its start,
// its middle and its end.
func pick(seqs []int64, n int) []int64 {
	if n <= 0 || len(seqs) <= n {
		return seqs
	}
	out := make([]int64, 0, n)
	for i := range n {
		idx := 0
		if n > 1 {
			idx = i * (len(seqs) - 1) / (n - 1)
		}
		out = append(out, seqs[idx])
	}
	return out
}
