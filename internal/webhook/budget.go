package webhook

import (
	"errors"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxPending bounds the bytes of request bodies the receiver holds
// at once (read, being verified, or waiting for their durable write). Sixteen
// maximal deliveries; far more than providers send at once in practice,
// whose deliveries are a few kilobytes.
const DefaultMaxPending = 64 << 20

// smallBody is the size up to which a body may use the part of the budget
// kept back from large ones. Real status and inbound deliveries are a few
// kilobytes; a flood of multi-megabyte bodies must not starve them.
const smallBody = 64 << 10

// errBusy means the budget had no room for a body: the client is told to
// come back later (503 with Retry-After).
var errBusy = errors.New("webhook: too many bytes awaiting verification")

// budget counts the bytes of bodies held in memory. An eighth of it (at
// least enough for a few small bodies) is kept for bodies up to smallBody,
// so that large unsigned bodies cannot crowd out the small signed ones a
// provider sends.
type budget struct {
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

func newBudget(limit int64) *budget {
	reserve := limit / 8
	if reserve < 4*smallBody {
		reserve = min(4*smallBody, limit)
	}
	return &budget{max: limit, reserve: reserve}
}

// take reserves n bytes; small says the whole body fits in smallBody.
func (b *budget) take(n int64, small bool) bool {
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
// the end of a burst to be worth a forced collection.
const freeAfter = 16 << 20

// give returns n bytes. When a burst is over (nothing held any more, and a
// lot was held), the memory its bodies took is handed back to the operating
// system: Go's scavenger would do it too, but over minutes, and a receiver
// that sits at its peak size after every flood invites the OOM killer.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	burst := b.used == 0 && b.highSinceFree >= freeAfter
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
func (b *budget) freeOSMemory() {
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
func (b *budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// readStep is how much of a body of unknown length is reserved and read
// at a time.
const readStep = 32 << 10

// errTooLarge: the body is over the per-request limit.
var errTooLarge = errors.New("webhook: body too large")

// readLimited reads a body of at most maxBody bytes into memory reserved
// from b. A declared length is reserved in full before anything is read, so
// a refused body is never read at all; a body of unknown length (chunked)
// is reserved step by step as it arrives. The caller gives back the
// returned reservation once the body is no longer held.
// Errors: errTooLarge, errBusy, or the read's error.
func readLimited(body io.Reader, declared, maxBody int64, b *budget) ([]byte, int64, error) {
	if declared > maxBody {
		return nil, 0, errTooLarge
	}
	if declared >= 0 {
		if !b.take(declared, declared <= smallBody) {
			return nil, 0, errBusy
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
				return nil, reserved, errTooLarge
			}
			newCap := int64(cap(buf)) + grow
			if !b.take(grow, newCap <= smallBody) {
				return nil, reserved, errBusy
			}
			reserved += grow
			nb := make([]byte, len(buf), newCap)
			copy(nb, buf)
			buf = nb
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > maxBody {
			return nil, reserved, errTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, reserved, nil
		}
		if err != nil {
			return nil, reserved, err
		}
	}
}
