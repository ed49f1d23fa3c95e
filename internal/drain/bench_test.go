package drain_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
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
