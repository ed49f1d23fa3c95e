// Command webhookflood measures `msgq webhook serve` under the memory attack
// of issue 12: many connections posting large bodies whose signature is
// wrong (or absent), while a provider keeps posting small signed
// deliveries. It runs the real binary and reads its resident size from
// /proc (Linux), and prints the serve process's idle, peak and after-burst
// RSS and what each side was answered.
//
//	go build -o /tmp/msgq ../cmd/msgq && go run ./cmd/webhookflood -msgq /tmp/msgq
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgq/msgq/internal/webhook/verify"
)

const (
	appSecret = "bench-app-secret"
	phoneID   = "106540352242922"
)

func main() {
	bin := flag.String("msgq", "msgq", "the msgq binary to run")
	conns := flag.Int("conns", 200, "attacking connections")
	size := flag.Int("body", 4<<20, "attacking body size in bytes")
	sig := flag.String("sig", "bogus", "attackers' signature: bogus (well-formed, wrong: the body must be read) or none")
	chunked := flag.Bool("chunked", false, "attackers send no Content-Length (chunked encoding)")
	dur := flag.Duration("duration", 20*time.Second, "how long the attack lasts")
	every := flag.Duration("valid-every", 50*time.Millisecond, "how often the provider posts a signed delivery")
	settle := flag.Duration("settle", 10*time.Second, "how long to watch RSS after the attack")
	maxRSS := flag.Int64("max-rss", 256, "fail when the serve process's peak resident size passes this many MiB")
	flag.Parse()
	serveArgs := flag.Args()
	if err := run(*bin, *conns, *size, *sig, *chunked, *dur, *every, *settle, *maxRSS, serveArgs); err != nil {
		fmt.Fprintln(os.Stderr, "webhookflood:", err)
		os.Exit(1)
	}
}

func run(bin string, conns, size int, sig string, chunked bool, dur, every, settle time.Duration, maxRSS int64, serveArgs []string) error {
	dir, err := os.MkdirTemp("", "webhookflood")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("identities:\n  shop:\n    provider: whatsapp\n    phone_number_id: \""+phoneID+"\"\n"+
		"    token_env: BENCH_TOKEN\n    app_secret_env: BENCH_APP_SECRET\n"), 0o600); err != nil {
		return err
	}
	args := append([]string{"webhook", "serve", "--addr", "127.0.0.1:0", "--config", cfg, "--store", "sqlite:" + filepath.Join(dir, "q.db")}, serveArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "BENCH_TOKEN=x", "BENCH_APP_SECRET="+appSecret)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "webhook: listening on "); ok {
				url <- u
			}
		}
	}()
	var base string
	select {
	case base = <-url:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("msgq webhook serve did not listen within 30s")
	}
	pid := cmd.Process.Pid

	// Warm up: a few valid deliveries, then the idle size.
	valid := &tally{}
	vc := &http.Client{Timeout: 30 * time.Second}
	for i := range 20 {
		postValid(vc, base, i, valid)
	}
	time.Sleep(time.Second)
	idle := rss(pid, "VmRSS")

	var peak atomic.Int64
	stopSample := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSample:
				return
			case <-t.C:
				if v := rss(pid, "VmRSS"); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	})

	body := bytes.Repeat([]byte{'x'}, size)
	badSig := "sha256=" + strings.Repeat("0", 64)
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	attack := &tally{}
	at := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	ac := &http.Client{Transport: at, Timeout: time.Minute}
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for ctx.Err() == nil {
				var r io.Reader = bytes.NewReader(body)
				if chunked {
					r = io.MultiReader(r) // hides the length
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/whatsapp", r)
				if sig == "bogus" {
					req.Header.Set("X-Hub-Signature-256", badSig)
				}
				resp, err := ac.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						attack.add("error", 0)
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				attack.add(strconv.Itoa(resp.StatusCode), 0)
			}
		})
	}
	valid = &tally{}
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				postValid(vc, base, 1000+i, valid)
			}
		}
	})
	wg.Wait()
	at.CloseIdleConnections()
	after := map[time.Duration]int64{}
	start := time.Now()
	for _, d := range []time.Duration{time.Second, 3 * time.Second, settle} {
		time.Sleep(time.Until(start.Add(d)))
		after[d] = rss(pid, "VmRSS")
	}
	close(stopSample)
	sampled.Wait()
	hwm := rss(pid, "VmHWM")

	mib := func(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }
	fmt.Printf("attack: %d connections, %d-byte bodies (chunked %v), signature %s, %s; serve args %q\n", conns, size, chunked, sig, dur, serveArgs)
	fmt.Printf("rss idle %s, peak sampled %s, VmHWM %s; after the attack: +1s %s, +3s %s, +%s %s\n",
		mib(idle), mib(peak.Load()), mib(hwm), mib(after[time.Second]), mib(after[3*time.Second]), settle, mib(after[settle]))
	fmt.Printf("attackers answered: %s\n", attack)
	fmt.Printf("valid deliveries answered: %s; latency median %s, slowest %s\n", valid, valid.quantile(0.5), valid.quantile(1))
	if valid.n["200"] == 0 || valid.n["200"]+valid.n["200 after a retry"] != valid.total() {
		return fmt.Errorf("not every valid delivery was answered 200")
	}
	if peakKB := max(hwm, peak.Load()); peakKB > maxRSS<<10 {
		return fmt.Errorf("peak RSS %s is over -max-rss %d MiB", mib(peakKB), maxRSS)
	}
	return nil
}

// postValid posts one signed delivery, and once more on a transport error
// (as a provider retries); a delivery answered 200 the second time is
// counted as "200 after a retry".
func postValid(c *http.Client, base string, i int, t *tally) {
	body := fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":`+
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":%q},`+
		`"statuses":[{"id":"wamid.bench%d","status":"delivered","timestamp":"%d","recipient_id":"15551234567"}]},"field":"messages"}]}]}`,
		phoneID, i, time.Now().Unix())
	start := time.Now()
	for try := 1; ; try++ {
		req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/whatsapp", bytes.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", verify.SignWhatsApp(body, []byte(appSecret)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			fmt.Fprintf(os.Stderr, "webhookflood: a valid delivery failed (try %d) after %s: %v\n", try, time.Since(start).Round(time.Millisecond), err)
			if try == 1 {
				continue
			}
			t.add("error", time.Since(start))
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code := strconv.Itoa(resp.StatusCode)
		if try > 1 {
			code += " after a retry"
		}
		t.add(code, time.Since(start))
		return
	}
}

// rss reads a field (kB) of /proc/PID/status.
func rss(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

type tally struct {
	mu   sync.Mutex
	n    map[string]int
	took []time.Duration
}

func (t *tally) add(code string, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[code]++
	t.took = append(t.took, took)
}

func (t *tally) total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := 0
	for _, v := range t.n {
		s += v
	}
	return s
}

// quantile is the q-quantile of the recorded latencies (1: the slowest).
func (t *tally) quantile(q float64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.took) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), t.took...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))].Round(time.Millisecond)
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ks []string
	for k := range t.n {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s x%d", k, t.n[k]))
	}
	return strings.Join(parts, ", ")
}
