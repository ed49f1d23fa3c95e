// Package groupcommit writes what many goroutines hand over in one store
// transaction: every item waiting when a write starts goes into it, so one
// fsync acknowledges many requests. Under load the batches grow by
// themselves; alone, an item is written at once. `msgq serve` (its single
// sends) and `webhook serve` (its verified deliveries) both answer only once
// their own write is durable, and both use it.
package groupcommit

import (
	"context"
	"errors"
	"runtime"
	"time"
)

// ErrClosed is the answer to an item handed over after Close began, or
// left unwritten by a committer that stopped.
var ErrClosed = errors.New("groupcommit: closed")

// lingerYields bounds the yields of a batch waiting for more (loop).
const lingerYields = 3

// Write writes one batch in one transaction and returns one result per
// item, in order, or an error that is every item's.
type Write[T, R any] func(ctx context.Context, items []T) ([]R, error)

// Committer is one goroutine writing batches. Start it with Start and
// Close it once nobody hands anything over any more.
type Committer[T, R any] struct {
	in      chan *item[T, R]
	done    chan struct{}
	stop    context.CancelFunc
	max     int
	timeout time.Duration
	write   Write[T, R]
}

type item[T, R any] struct {
	v   T
	res chan result[R]
}

type result[R any] struct {
	r   R
	err error
}

// Start runs a committer that writes at most max items a transaction, each
// write bounded by timeout.
func Start[T, R any](max int, timeout time.Duration, write Write[T, R]) *Committer[T, R] {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Committer[T, R]{in: make(chan *item[T, R], max), done: make(chan struct{}), stop: cancel,
		max: max, timeout: timeout, write: write}
	go c.loop(ctx)
	return c
}

// Do hands v over and waits until it is written. ctx bounds only the
// hand-over: once handed over, the write happens whether or not the caller
// still waits, and Do waits for it, so an answer never goes out before its
// own write is durable.
func (c *Committer[T, R]) Do(ctx context.Context, v T) (R, error) {
	it := &item[T, R]{v: v, res: make(chan result[R], 1)}
	var zero R
	// A caller already gone hands nothing over (the select below would
	// pick at random between its two ready cases).
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	select {
	case c.in <- it:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.done:
		return zero, ErrClosed
	}
	select {
	case res := <-it.res:
		return res.r, res.err
	case <-c.done:
		// The committer may have written it last thing, or not at all.
		select {
		case res := <-it.res:
			return res.r, res.err
		default:
			return zero, ErrClosed
		}
	}
}

// Close stops the committer. Items already handed over (a shutdown whose
// grace ran out leaves callers waiting) are written and answered first.
func (c *Committer[T, R]) Close() {
	c.stop()
	<-c.done
}

func (c *Committer[T, R]) loop(ctx context.Context) {
	defer close(c.done)
	batch := make([]*item[T, R], 0, c.max)
	vs := make([]T, 0, c.max)
	for {
		batch, vs = batch[:0], vs[:0]
		select {
		case <-ctx.Done():
			select {
			case it := <-c.in:
				batch = append(batch, it)
			default:
				return
			}
		case it := <-c.in:
			batch = append(batch, it)
		}
		// Under load (more than one item waiting), yield to the goroutines
		// whose items are on their way (a handler that has parsed its
		// request is about to send) before writing: up to lingerYields times,
		// while each yield brings more. At 64 connections on SQLite the
		// batches grew from about 19 items to 26 and the API took about a
		// tenth more sends a second (bench/README.md); a lone item is still
		// written at once.
		for yields := 0; ; yields++ {
			before := len(batch)
		more:
			for len(batch) < c.max {
				select {
				case it := <-c.in:
					batch = append(batch, it)
				default:
					break more
				}
			}
			if len(batch) == 1 || len(batch) >= c.max || yields == lingerYields || (yields > 0 && len(batch) == before) {
				break
			}
			runtime.Gosched()
		}
		for _, it := range batch {
			vs = append(vs, it.v)
		}
		// Not a caller's context: a client that hangs up must not abort
		// a write that carries other clients' items.
		wctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		rs, err := c.write(wctx, vs)
		cancel()
		if err == nil && len(rs) != len(batch) {
			err = errors.New("groupcommit: the write returned a result count other than its items'")
		}
		for i, it := range batch {
			if err != nil {
				it.res <- result[R]{err: err}
				continue
			}
			it.res <- result[R]{r: rs[i]}
		}
	}
}
