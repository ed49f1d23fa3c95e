package versus

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/sqlite"
)

// msgqSide opens msgq stores: a fresh schema or a fresh file per queue.
type msgqSide struct{ o *Options }

func (msgqSide) name() string { return "msgq" }

func (m msgqSide) open(ctx context.Context, st string, seq int) (queue, error) {
	switch st {
	case storePostgres:
		schema := fmt.Sprintf("versus_msgq_%d_%d", time.Now().UnixNano(), seq)
		app := appName(m.name(), seq)
		s, err := postgres.Open(ctx, withApp(m.o.PostgresURL, app), postgres.Options{Schema: schema})
		if err != nil {
			return nil, err
		}
		return &msgqQueue{o: m.o, s: s, appName: app, cleanup: func() (tally, error) { s.Close(); return tallyAndDrop(m.o.PostgresURL, schema) }}, nil
	case storeSQLite:
		path := filepath.Join(m.o.Dir, fmt.Sprintf("msgq-%d.db", seq))
		s, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			return nil, err
		}
		return &msgqQueue{o: m.o, s: s, cleanup: func() (tally, error) { s.Close(); return nil, removeSQLite(path) }}, nil
	}
	return nil, fmt.Errorf("unknown store %q", st)
}

type msgqQueue struct {
	o       *Options
	s       store.Store
	appName string
	cleanup func() (tally, error)
	tally   tally
}

func (q *msgqQueue) insertMany(ctx context.Context, rs []row) (replayed int, err error) {
	ps := make([]store.EnqueueParams, 0, q.o.Batch)
	for off := 0; off < len(rs); off += q.o.Batch {
		ps = ps[:0]
		for _, r := range rs[off:min(off+q.o.Batch, len(rs))] {
			ps = append(ps, r.msgq)
		}
		res, err := q.s.MessageEnqueueMany(ctx, ps)
		if err != nil {
			return replayed, err
		}
		for _, r := range res {
			if r.Err != nil {
				return replayed, r.Err
			}
			if r.Replayed {
				replayed++
			}
		}
	}
	return replayed, nil
}

func (q *msgqQueue) insertOne(ctx context.Context, r row) (bool, error) {
	res, err := q.s.MessageEnqueue(ctx, &r.msgq)
	if err != nil {
		return false, err
	}
	return res.Replayed, nil
}

// work drains the queue against the in-process simulator (no latency, no
// faults): for each message a durable claim with a lease before the call,
// then the outcome, its history row and an attempt row in a group commit.
func (q *msgqQueue) work(ctx context.Context, n int) (time.Duration, error) {
	cfg := drain.Config{
		Store: q.s, Owner: "versus", Concurrency: q.o.Concurrency,
		Identities: map[string]*drain.Identity{"sim": {
			Name: "sim", Provider: sim.New(sim.DefaultConfig()).Provider(), Policy: retry.DefaultPolicy(),
		}},
	}
	start := time.Now()
	sum, err := drain.Run(ctx, cfg)
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if sum.Sent != n {
		return d, fmt.Errorf("msgq drain sent %d of %d (%+v)", sum.Sent, n, sum)
	}
	return d, nil
}

func (q *msgqQueue) close() (err error) {
	q.tally, err = q.cleanup()
	return err
}

func (q *msgqQueue) writes() tally { return q.tally }
func (q *msgqQueue) app() string   { return q.appName }
