package drain_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/storetest"
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

// BenchmarkDrainSQLiteWithEventEndpoint is BenchmarkDrainSQLiteInProcessSim
// with an events endpoint registered for the rows' tenant: every sent row
// also writes its status event (docs/events.md) in the same transaction.
//
//	go test -run '^$' -bench DrainSQLite -benchtime 2x ./internal/drain
func BenchmarkDrainSQLiteWithEventEndpoint(b *testing.B) {
	const n = 20_000
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := setupB(b, n)
		if err := s.EndpointAdd(context.Background(), &store.Endpoint{ID: "ep_bench", URL: "https://app.example/events",
			Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}); err != nil {
			b.Fatal(err)
		}
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
		b.StopTimer()
		if bl, err := s.EventBacklog(context.Background()); err != nil || bl.Pending != n {
			b.Fatalf("event backlog %+v, %v; want %d pending", bl, err, n)
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

// BenchmarkDrainPostgresInProcessSim is BenchmarkDrainSQLiteInProcessSim on
// the local PostgreSQL (MSGQ_TEST_POSTGRES_URL), each run in a fresh schema,
// at several concurrencies: against a zero-latency provider the
// concurrency is the batch size of claims and outcome writes.
//
//	MSGQ_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test go test -run '^$' -bench DrainPostgres -benchtime 3x ./internal/drain
func BenchmarkDrainPostgresInProcessSim(b *testing.B) {
	url := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if url == "" {
		b.Skip("MSGQ_TEST_POSTGRES_URL is not set")
	}
	for _, conc := range []int{64, 256, 512, 1024} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) { benchDrainPostgres(b, url, conc) })
	}
}

func benchDrainPostgres(b *testing.B, url string, concurrency int) {
	const n = 20_000
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		schema := fmt.Sprintf("msgq_bench_%d", rand.Uint64())
		s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		ps := make([]store.EnqueueParams, n)
		for j := range ps {
			ps[j] = storetest.Params(fmt.Sprintf("k-%06d", j))
			ps[j].To = fmt.Sprintf("+1555%07d", j)
		}
		for off := 0; off < n; off += 4096 {
			if _, err := s.MessageEnqueueMany(context.Background(), ps[off:min(off+4096, n)]); err != nil {
				b.Fatal(err)
			}
		}
		cfg := config(s, sim.New(sim.DefaultConfig()).Provider())
		cfg.Concurrency = concurrency
		b.StartTimer()
		start := time.Now()
		sum, err := drain.Run(context.Background(), cfg)
		total += time.Since(start)
		b.StopTimer()
		s.Close()
		if c, cerr := pgx.Connect(context.Background(), url); cerr == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
		if err != nil {
			b.Fatal(err)
		}
		if sum.Sent != n {
			b.Fatalf("sent %d of %d", sum.Sent, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
}
