package versus

import (
	"context"
	"errors"
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

// msgqSide opens msgq stores: a fresh schema or a fresh file per queue,
// or a copy of its aged template.
type msgqSide struct {
	o *Options
	// aged is the aged template per store: a database name or a file.
	aged map[string]string
}

func (msgqSide) name() string { return "msgq" }

// versusEndpoint is the event endpoint of the endpoint workload: it is
// never called (no dispatcher runs), only written to.
var versusEndpoint = store.Endpoint{ID: "ep_versus", Tenant: store.DefaultTenant,
	URL: "https://app.example/hooks", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}

func (m msgqSide) open(ctx context.Context, st string, seq int, f fill) (queue, error) {
	var q *msgqQueue
	var err error
	switch st {
	case storePostgres:
		q, err = m.openPostgres(ctx, seq, f)
	case storeSQLite:
		q, err = m.openSQLite(ctx, seq, f)
	default:
		return nil, fmt.Errorf("unknown store %q", st)
	}
	if err != nil {
		return nil, err
	}
	if f.endpoint {
		// For the rows' tenant (storetest.Params leaves it default): each
		// outcome of the drain then writes an event into the outbox.
		ep := versusEndpoint
		if err := q.s.EndpointAdd(ctx, &ep); err != nil {
			return nil, errors.Join(fmt.Errorf("endpoint: %w", err), q.close())
		}
		q.endpoint = true
	}
	return q, nil
}

func (m msgqSide) openPostgres(ctx context.Context, seq int, f fill) (*msgqQueue, error) {
	url, schema := m.o.PostgresURL, fmt.Sprintf("versus_msgq_%d_%d", time.Now().UnixNano(), seq)
	drop := func() (tally, error) { return tallyAndDrop(url, schema) }
	if f.aged > 0 {
		db, err := copyDatabase(ctx, m.o.PostgresURL, m.aged[storePostgres], seq)
		if err != nil {
			return nil, err
		}
		url, schema = withDB(url, db), agedSchema
		drop = func() (tally, error) { return nil, dropDatabase(m.o.PostgresURL, db) }
	}
	app := appName(m.name(), seq)
	s, err := postgres.Open(ctx, withApp(url, app), postgres.Options{Schema: schema})
	if err != nil {
		_, derr := drop()
		return nil, errors.Join(err, derr)
	}
	return &msgqQueue{o: m.o, s: s, appName: app, cleanup: func() (tally, error) { s.Close(); return drop() }}, nil
}

func (m msgqSide) openSQLite(ctx context.Context, seq int, f fill) (*msgqQueue, error) {
	path := filepath.Join(m.o.Dir, fmt.Sprintf("msgq-%d.db", seq))
	if f.aged > 0 {
		if err := copyFile(m.aged[storeSQLite], path); err != nil {
			return nil, errors.Join(err, removeSQLite(path))
		}
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return nil, errors.Join(err, removeSQLite(path))
	}
	return &msgqQueue{o: m.o, s: s, cleanup: func() (tally, error) { s.Close(); return nil, removeSQLite(path) }}, nil
}

// template fills, untimed, the store with n finished messages whose
// copies the aged workload's runs on store st start from, and returns what
// removes it. The store is migrated, closed, filled over a connection of
// its own (internal/store/aged) and never opened again before it is
// copied: a run's store sees the rows from its first statement on.
func (m msgqSide) template(ctx context.Context, st string, n int) (func() error, error) {
	switch st {
	case storePostgres:
		db, err := createDatabase(ctx, m.o.PostgresURL, "versus_aged_msgq")
		if err != nil {
			return nil, err
		}
		remove := func() error { return dropDatabase(m.o.PostgresURL, db) }
		url := withDB(m.o.PostgresURL, db)
		err = func() error {
			s, err := postgres.Open(ctx, url, postgres.Options{Schema: agedSchema})
			if err != nil {
				return err
			}
			now, err := s.ClockNow(ctx)
			s.Close()
			if err != nil {
				return err
			}
			return fillMsgqPostgres(ctx, url, agedSchema, n, now)
		}()
		if err != nil {
			return nil, errors.Join(err, remove())
		}
		m.aged[st] = db
		return remove, nil
	case storeSQLite:
		path := filepath.Join(m.o.Dir, "msgq-aged.db")
		remove := func() error { return removeSQLite(path) }
		err := func() error {
			s, err := sqlite.Open(ctx, path, sqlite.Options{})
			if err != nil {
				return err
			}
			now, err := s.ClockNow(ctx)
			s.Close()
			if err != nil {
				return err
			}
			return fillMsgqSQLite(ctx, path, n, now)
		}()
		if err != nil {
			return nil, errors.Join(err, remove())
		}
		m.aged[st] = path
		return remove, nil
	}
	return nil, fmt.Errorf("unknown store %q", st)
}

type msgqQueue struct {
	o       *Options
	s       store.Store
	appName string
	cleanup func() (tally, error)
	tally   tally
	// endpoint: an event endpoint is registered for the rows' tenant.
	endpoint bool
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
	if q.endpoint {
		// Untimed: every message sent has its event in the outbox, waiting
		// for a dispatcher that does not run here.
		b, err := q.s.EventBacklog(ctx)
		if err != nil {
			return d, err
		}
		if b.Pending < n {
			return d, fmt.Errorf("msgq drain with an endpoint: %d events pending for %d messages sent", b.Pending, n)
		}
	}
	return d, nil
}

func (q *msgqQueue) close() (err error) {
	q.tally, err = q.cleanup()
	return err
}

func (q *msgqQueue) writes() tally { return q.tally }
func (q *msgqQueue) app() string   { return q.appName }
