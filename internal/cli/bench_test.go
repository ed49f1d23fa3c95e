package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/cli"
)

// writeJSONL writes n distinct, valid send lines: templates and text,
// 1,000 recipients, some with expiries, like a nightly batch. Keys are
// scattered (not in index order), as order ids hashed into keys would be.
func writeJSONL(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		if i%2 == 0 {
			fmt.Fprintf(w, `{"key":"bulk-%016x","to":"+1555%07d","template":"order_update","params":["Ada","%d"],"purpose":"shipping"}`+"\n", scatter(i), i%1000, i)
		} else {
			fmt.Fprintf(w, `{"key":"bulk-%016x","to":"+1555%07d","text":"Your order %d shipped","expires_in":"24h"}`+"\n", scatter(i), i%1000, i)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// scatter is splitmix64: a bijection, so keys stay distinct.
func scatter(i int) uint64 {
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// BenchmarkSendFile100k measures `msgq send --file` of 100,000 JSON lines
// into a fresh SQLite store, durable on return (WAL, synchronous=FULL, one
// commit per 4,096 lines). Reported as rows/s.
//
//	go test -run '^$' -bench SendFile100k -benchtime 3x ./internal/cli
func BenchmarkSendFile100k(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	writeJSONL(b, in, n)
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		storeURL := "sqlite:" + filepath.Join(dir, fmt.Sprintf("bench-%d.db", i))
		b.StartTimer()
		start := time.Now()
		code := cli.Run(context.Background(), []string{"send", "--file", in, "--store", storeURL},
			&cli.IOStreams{Out: io.Discard, Err: io.Discard})
		total += time.Since(start)
		if code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "rows/s")
}

// BenchmarkSendProcess measures the wall time of one `msgq send` process
// (a new key each time) against an existing store: what a shell loop or a
// cron job pays per message. The binary is built with `go build`.
//
//	go test -run '^$' -bench SendProcess -benchtime 200x ./internal/cli
func BenchmarkSendProcess(b *testing.B) {
	bin := buildMsgq(b)
	storeURL := "sqlite:" + filepath.Join(b.TempDir(), "q.db")
	run := func(args ...string) {
		cmd := exec.Command(bin, append([]string{"--store", storeURL}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	run("migrate")
	b.Run("new key", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			run("send", "--key", fmt.Sprintf("proc-%d-%d", b.N, i), "--to", "+15551234567", "--template", "order_update", "--param", "Ada")
		}
	})
	b.Run("replay", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			run("send", "--key", "proc-replay", "--to", "+15551234567", "--template", "order_update", "--param", "Ada")
		}
	})
}

// buildMsgq builds msgq as it is released (no race detector, CGO off).
func buildMsgq(b testing.TB) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "msgq")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/msgq/msgq/cmd/msgq")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// BenchmarkDrainPeakMemory reports the peak resident memory (ru_maxrss) of
// one `msgq drain` process over 1,000 and over 100,000 queued rows. The
// provider is a `msgq sim serve` process (the built-in in-process sim would
// count its own delivery log against the drain). The drain claims in
// batches and holds only its in-flight rows, and SQLite's page cache is
// bounded, so the two should differ by a small constant.
//
//	go test -run '^$' -bench DrainPeakMemory -benchtime 1x ./internal/cli
func BenchmarkDrainPeakMemory(b *testing.B) {
	bin := buildMsgq(b)
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("%d rows", n), func(b *testing.B) {
			var peak int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				base := serveSimB(b, bin)
				dir := b.TempDir()
				cfg := filepath.Join(dir, "msgq.yaml")
				if err := os.WriteFile(cfg, []byte("identities:\n  sim:\n    provider: sim\n    base_url: "+base+"\n"), 0o600); err != nil {
					b.Fatal(err)
				}
				in := filepath.Join(dir, "in.jsonl")
				writeJSONL(b, in, n)
				storeURL := "sqlite:" + filepath.Join(dir, "q.db")
				if out, err := exec.Command(bin, "send", "--file", in, "--store", storeURL).CombinedOutput(); err != nil {
					b.Fatalf("send: %v: %s", err, out)
				}
				b.StartTimer()
				cmd := exec.Command(bin, "drain", "--store", storeURL, "--config", cfg, "--concurrency", "64")
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("drain: %v: %s", err, out)
				}
				if !strings.Contains(string(out), fmt.Sprintf("sent %d,", n)) {
					b.Fatalf("drain did not send every row: %s", out)
				}
				if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
					peak = max(peak, ru.Maxrss)
				}
			}
			b.ReportMetric(float64(peak)/1024, "peak-MiB")
		})
	}
}

// serveSimB starts `msgq sim serve` on a free port for a benchmark.
func serveSimB(b *testing.B, bin string) string {
	b.Helper()
	cmd := exec.Command(bin, "sim", "serve", "--addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	_, url, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	if !ok {
		b.Fatalf("sim serve printed %q", line)
	}
	return url
}
