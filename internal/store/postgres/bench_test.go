package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// BenchmarkEnqueueMany100k measures bulk enqueue of 100,000 rows into the
// local PostgreSQL in batches of 4,096 (what `msgq send --file` sends per
// transaction), scattered keys, each batch committed with
// synchronous_commit on. Reported as rows/s.
//
//	MSGQ_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test go test -run '^$' -bench EnqueueMany100k -benchtime 3x ./internal/store/postgres
func BenchmarkEnqueueMany100k(b *testing.B) {
	url := testURL(b)
	const n, batch = 100_000, 4096
	ps := make([]store.EnqueueParams, n)
	for i := range ps {
		ps[i] = storetest.Params(fmt.Sprintf("bulk-%016x", uint64(i)*0x9e3779b97f4a7c15))
		ps[i].To = fmt.Sprintf("+1555%07d", i%1000)
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := Open(context.Background(), url, Options{Schema: freshSchema(b, url)})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		for off := 0; off < n; off += batch {
			res, err := s.MessageEnqueueMany(context.Background(), ps[off:min(off+batch, n)])
			if err != nil {
				b.Fatal(err)
			}
			if res[0].Err != nil {
				b.Fatal(res[0].Err)
			}
		}
		total += time.Since(start)
		b.StopTimer()
		s.Close()
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "rows/s")
}
