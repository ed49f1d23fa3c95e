// Package bodybudget bounds the memory an HTTP server spends on request
// bodies: each body is read into memory reserved from one budget shared by
// every request in flight, and a body that does not fit is refused before
// it is read. `webhook serve` (internal/webhook) and `msgq serve`
// (internal/api) read their bodies through it.
package bodybudget

import (
	"errors"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// SmallBody is the size up to which a body may use the part of the budget
// kept back from large ones. Real sends and webhook deliveries are a few
// kilobytes; a flood of multi-megabyte bodies must not starve them.
const SmallBody = 64 << 10

// ErrBusy means the budget had no room for a body: the client is told to
// come back later (503 with Retry-After).
var ErrBusy = errors.New("bodybudget: too many bytes of request bodies held")

// ErrTooLarge means the body is over the per-request limit (413).
var ErrTooLarge = errors.New("bodybudget: body too large")

// Budget counts the bytes of bodies held in memory. An eighth of it (at
// least enough for a few small bodies) is kept for bodies up to SmallBody,
// so that large bodies cannot crowd out the small ones real clients send.
type Budget struct {
	mu      sync.Mutex
	max     int64
	reserve int64 // only small bodies may use the last reserve bytes
	used    int64
	// highSinceFree is the most that was held since memory was last
	// handed back to the operating system.
	highSinceFree int64

	freeing  atomic.Bool
	lastFree atomic.Int64 // unix nanoseconds
}

// New is a budget of limit bytes.
func New(limit int64) *Budget {
	return &Budget{max: limit, reserve: reserve(limit)}
}

// reserve is the part of a budget of limit bytes that only small bodies
// may use: an eighth, and at least room for four of them.
func reserve(limit int64) int64 {
	if r := limit / 8; r >= 4*SmallBody {
		return r
	}
	return min(4*SmallBody, limit)
}

// LargestBody is the largest body a budget of limit bytes can ever admit:
// a body over SmallBody may not use the reserve. A server's per-request
// limit must not be larger, or a body of that size would only ever be
// answered 503.
func LargestBody(limit int64) int64 {
	return max(limit-reserve(limit), min(SmallBody, limit))
}

// take reserves n bytes; small says the whole body fits in SmallBody.
func (b *Budget) take(n int64, small bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.max
	if !small {
		limit -= b.reserve
	}
	if b.used+n > limit {
		return false
	}
	b.used += n
	b.highSinceFree = max(b.highSinceFree, b.used)
	return true
}

// freeAfter is how much must have been held since the last hand-back for
// the end of a burst to be worth a forced collection (or half the budget,
// if that is less).
const freeAfter = 16 << 20

// Give returns n bytes that Read reserved. When a burst is over (nothing
// held any more, and a lot was held), the memory its bodies took is handed
// back to the operating system: Go's scavenger would do it too, but over
// minutes, and a server that sits at its peak size after every flood
// invites the OOM killer.
func (b *Budget) Give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	burst := b.used == 0 && b.highSinceFree >= min(freeAfter, b.max/2)
	if burst {
		b.highSinceFree = 0
	}
	b.mu.Unlock()
	if burst {
		b.freeOSMemory()
	}
}

// freeOSMemory runs debug.FreeOSMemory (a full collection) in the
// background, at most one at a time and at most once a second, so that a
// sustained attack does not turn into a collection per request.
func (b *Budget) freeOSMemory() {
	now := time.Now().UnixNano()
	if now-b.lastFree.Load() < int64(time.Second) || !b.freeing.CompareAndSwap(false, true) {
		return
	}
	b.lastFree.Store(now)
	go func() {
		defer b.freeing.Store(false)
		debug.FreeOSMemory()
	}()
}

// Used is how many bytes are held now (for tests and metrics).
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// readStep is how much of a body of unknown length is reserved and read
// at a time.
const readStep = 32 << 10

// Read reads a body of at most maxBody bytes into memory reserved from b.
// declared is the request's Content-Length (-1: unknown). A declared
// length is checked against maxBody and reserved in full before anything
// is read, so a refused body is never read at all; a body of unknown
// length (chunked) is reserved step by step as it arrives, and refused as
// soon as it passes maxBody or the budget. The caller gives back the
// returned reservation (Give) once the body, and what was made from it,
// is no longer held; it is returned with every error too.
// Errors: ErrTooLarge, ErrBusy, or the read's error.
func (b *Budget) Read(body io.Reader, declared, maxBody int64) ([]byte, int64, error) {
	if declared > maxBody {
		return nil, 0, ErrTooLarge
	}
	if declared >= 0 {
		if !b.take(declared, declared <= SmallBody) {
			return nil, 0, ErrBusy
		}
		buf := make([]byte, declared)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, declared, err
		}
		return buf, declared, nil
	}
	var (
		buf      []byte
		reserved int64
	)
	for {
		if len(buf) == cap(buf) {
			// Grow by doubling (at least a step), but never past one byte
			// over the limit: that byte is how an oversized body shows.
			grow := min(max(int64(cap(buf)), readStep), maxBody+1-int64(cap(buf)))
			if grow <= 0 {
				return nil, reserved, ErrTooLarge
			}
			newCap := int64(cap(buf)) + grow
			if !b.take(grow, newCap <= SmallBody) {
				return nil, reserved, ErrBusy
			}
			reserved += grow
			nb := make([]byte, len(buf), newCap)
			copy(nb, buf)
			buf = nb
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > maxBody {
			return nil, reserved, ErrTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, reserved, nil
		}
		if err != nil {
			return nil, reserved, err
		}
	}
}
