package drain_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/sim"
)

// BenchmarkDrainSQLiteInProcessSim measures end-to-end drain throughput on
// SQLite against the in-process simulator with zero latency: every claim
// and every outcome durable (WAL, synchronous=FULL). Reported as msgs/s.
//
//	go test -run '^$' -bench DrainSQLite -benchtime 3x ./internal/drain
func BenchmarkDrainSQLiteInProcessSim(b *testing.B) {
	const n = 20_000
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := setupB(b, n)
		sm := sim.New(sim.DefaultConfig())
		cfg := config(s, sm.Provider())
		cfg.Concurrency = 64
		b.StartTimer()
		start := time.Now()
		sum, err := drain.Run(context.Background(), cfg)
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if sum.Sent != n {
			b.Fatalf("sent %d of %d", sum.Sent, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
}

// BenchmarkDrainHTTPSim100ms measures drain throughput against the
// simulator over HTTP (the generic http API) answering after 100 ms, with
// 64 calls in flight: the store must not be the bottleneck (the ceiling is
// 64 / 0.1 s = 640 msgs/s).
//
//	go test -run '^$' -bench DrainHTTPSim -benchtime 2x ./internal/drain
func BenchmarkDrainHTTPSim100ms(b *testing.B) {
	const n = 4000
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := setupB(b, n)
		cfg := sim.DefaultConfig()
		cfg.Latency = 100 * time.Millisecond
		srv := httptest.NewServer(sim.New(cfg).Handler())
		// The default client: what msgq drain itself uses.
		p := httpapi.New(httpapi.Config{BaseURL: srv.URL, Token: "bench"})
		dc := config(s, p)
		dc.Concurrency = 64
		b.StartTimer()
		start := time.Now()
		sum, err := drain.Run(context.Background(), dc)
		total += time.Since(start)
		b.StopTimer()
		srv.Close()
		if err != nil {
			b.Fatal(err)
		}
		if sum.Sent != n {
			b.Fatalf("sent %d of %d", sum.Sent, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
}
