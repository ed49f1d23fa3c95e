package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/msgq/msgq/internal/store"
)

// BenchmarkEnqueueBatch64 is the write of msgq serve's group commit under
// load: batches of 64 new sends (the bench's connections), each batch one
// durable transaction. It reports the committer's time a row, which bounds
// the API's rate on SQLite (bench/README.md).
//
//	go test -run '^$' -bench EnqueueBatch64 -benchtime 2000x ./internal/store/sqlite
func BenchmarkEnqueueBatch64(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "msgq.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 64
	ps := make([]store.EnqueueParams, batch)
	n := 0
	b.ResetTimer()
	for b.Loop() {
		for i := range ps {
			n++
			ps[i] = store.EnqueueParams{Tenant: "bench", Key: fmt.Sprintf("bench-%d", n), To: fmt.Sprintf("+1555%07d", n%10000000),
				Channel: store.ChannelWhatsApp, Identity: "sim", Lane: store.LaneBulk,
				Payload: store.Payload{Template: "order_update", Lang: "en", Params: []string{"Ada", fmt.Sprint(n)}}}
		}
		rs, err := s.MessageEnqueueMany(ctx, ps)
		if err != nil {
			b.Fatal(err)
		}
		if rs[0].Replayed || rs[0].Message == nil {
			b.Fatal("a new key was not written")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "µs/row")
}
