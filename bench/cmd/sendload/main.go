// Command sendload is an external load generator for `msgq serve`: it keeps
// N keep-alive connections busy posting POST /v1/messages, each request with
// its own Idempotency-Key (PREFIX-SEQ) and its own recipient, and reports
// the accepted (202) sends per second, the latency percentiles and every
// answer that was not 202. With --verify it then reads acknowledged keys
// back with GET /v1/messages?key=K, so that "each 202 is durable" is
// checked rather than assumed (also after a kill -9 and a restart: reads
// retry a refused connection for --verify-wait).
//
// It runs as its own process, so its CPU is not the server's (on a 2-core
// machine the two still share the cores). The run is good only when every
// request was answered 202 and every verified key was found; otherwise it
// prints what went wrong and exits 1.
//
//	MSGQ_API_KEY=... sendload --url http://127.0.0.1:8080 --connections 64 --requests 20000 --verify
//	sendload --url ... --key file:/run/key --duration 30s -o json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

// mainErr is the whole command with its writers passed in; it returns the
// exit code: 0 a good run, 1 a run that was not good, 2 bad flags.
func mainErr(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sendload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.URL, "url", "", "the server's base URL (POST URL/v1/messages)")
	fs.StringVar(&o.KeySource, "key", "env:MSGQ_API_KEY", "where the API key is: env:NAME or file:PATH (never the key itself)")
	fs.IntVar(&o.Connections, "connections", 16, "keep-alive connections, each with one request in flight")
	fs.IntVar(&o.Requests, "requests", 0, "total sends (or --duration)")
	fs.DurationVar(&o.Duration, "duration", 0, "send for this long, then let the requests in flight finish (or --requests)")
	fs.StringVar(&o.KeyPrefix, "key-prefix", "load-"+time.Now().UTC().Format("20060102T150405"), "Idempotency-Key prefix: request SEQ gets PREFIX-SEQ (a new prefix per run, or the server replays)")
	fs.StringVar(&o.ToPattern, "to", "+1555#######", "recipient pattern: each # is a digit of the sequence number")
	fs.StringVar(&o.Body, "body", "", "JSON body template with {{to}}, {{seq}} and {{key}}, or @FILE (default: a template send to the sim identity)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.DurationVar(&o.Wait, "wait", 0, "first wait up to this long for the server to answer GET /v1/openapi.json")
	fs.BoolVar(&o.Verify, "verify", false, "after the run, GET /v1/messages?key=K for acknowledged keys and count the missing")
	fs.IntVar(&o.VerifyMax, "verify-sample", 0, "verify this many acknowledged keys, spread over the run (0: all)")
	fs.DurationVar(&o.VerifyWait, "verify-wait", 30*time.Second, "how long one verification read retries a refused connection or a 503")
	fs.DurationVar(&o.Retry, "retry", 0, "send a request that got no answer again, with the same key, for up to this long (a client retrying through a restart)")
	fs.IntVar(&o.Samples, "samples", 10, "non-202 answers, errors and missing keys to print")
	output := fs.String("o", "table", "output: table or json")
	cpuProfile := fs.String("cpuprofile", "", "write the generator's own CPU profile to this file (how much of the machine it takes)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sendload: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "sendload: -o %q: want table or json\n", *output)
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(stderr, "sendload:", err)
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "sendload:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "sendload:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "sendload:", err)
		return 1
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
	} else {
		printTable(stdout, r)
	}
	if !r.Good {
		printProblems(stderr, r)
		return 1
	}
	return 0
}

func printTable(w io.Writer, r *report) {
	fmt.Fprintf(w, "connections   %d\n", r.Connections)
	fmt.Fprintf(w, "sent          %d in %.2fs\n", r.Sent, r.ElapsedS)
	fmt.Fprintf(w, "accepted      %d (202), %.0f/s\n", r.Accepted, r.AcceptedPerS)
	fmt.Fprintf(w, "statuses      %s\n", statusLine(r.Statuses))
	fmt.Fprintf(w, "errors        %d\n", r.Errors)
	if r.Retries > 0 {
		fmt.Fprintf(w, "retries       %d, %d answered 200 Idempotent-Replayed\n", r.Retries, r.ReplayedAfterRetry)
	}
	l := r.LatencyMS
	fmt.Fprintf(w, "latency       p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", l.P50, l.P90, l.P99, l.Max)
	if v := r.Verify; v != nil {
		fmt.Fprintf(w, "verified      %d keys: %d present, %d missing, %d errors\n", v.Checked, v.Present, v.Missing, v.Errors)
	}
	if r.Good {
		fmt.Fprintln(w, "result        good")
	} else {
		fmt.Fprintf(w, "result        NOT good: %s\n", strings.Join(r.NotGood, "; "))
	}
}

// printProblems names what made the run not good: the answers that were
// not 202 (with their bodies), the errors, the missing keys.
func printProblems(w io.Writer, r *report) {
	fmt.Fprintf(w, "sendload: NOT good: %s\n", strings.Join(r.NotGood, "; "))
	fmt.Fprintf(w, "sendload: statuses %s, %d errors\n", statusLine(r.Statuses), r.Errors)
	for _, s := range r.Samples {
		if s.Error != "" {
			fmt.Fprintf(w, "sendload:   %s: error: %s\n", s.Key, s.Error)
		} else {
			fmt.Fprintf(w, "sendload:   %s: %d %.300s\n", s.Key, s.Status, s.Body)
		}
	}
	if v := r.Verify; v != nil {
		for _, k := range v.MissingKeys {
			fmt.Fprintf(w, "sendload:   %s: acknowledged 202, not found\n", k)
		}
		for _, s := range v.ErrorSample {
			fmt.Fprintf(w, "sendload:   %s: not verified: %s\n", s.Key, s.Error)
		}
	}
}

func statusLine(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	// Status codes are three digits, so a string sort is numeric.
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s x%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
