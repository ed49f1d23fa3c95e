package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/groupcommit"
)

// Many callers at once: each gets its own item's result, items are
// written in batches of at most max, and none is written twice.
func TestEachCallerGetsItsOwnResultFromSharedBatches(t *testing.T) {
	const n, max = 2000, 64
	var mu sync.Mutex
	written := map[int]int{}
	batches, largest := 0, 0
	c := groupcommit.Start(max, time.Second, func(_ context.Context, vs []int) ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		batches++
		largest = maxInt(largest, len(vs))
		out := make([]int, len(vs))
		for i, v := range vs {
			written[v]++
			out[i] = v * 10
		}
		time.Sleep(time.Millisecond) // an fsync: callers pile up meanwhile
		return out, nil
	})
	defer c.Close()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := c.Do(context.Background(), i)
			if err != nil || r != i*10 {
				t.Errorf("item %d: %d, %v; want %d", i, r, err, i*10)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if written[i] != 1 {
			t.Errorf("item %d written %d times", i, written[i])
		}
	}
	if largest > max || largest < 2 || batches >= n {
		t.Errorf("%d batches, the largest of %d items (max %d): the writes were not grouped as they should be", batches, largest, max)
	}
}

// A failed write is the answer of every item in it, and of no other.
func TestAFailedWriteIsTheAnswerOfItsItemsOnly(t *testing.T) {
	boom := errors.New("disk full")
	c := groupcommit.Start(8, time.Second, func(_ context.Context, vs []string) ([]string, error) {
		if vs[0] == "bad" {
			return nil, boom
		}
		return vs, nil
	})
	defer c.Close()
	if _, err := c.Do(context.Background(), "bad"); !errors.Is(err, boom) {
		t.Errorf("bad: %v, want the write's error", err)
	}
	if r, err := c.Do(context.Background(), "good"); err != nil || r != "good" {
		t.Errorf("good: %q, %v", r, err)
	}
	// A write that miscounts its results fails its items rather than
	// answering one item with another's result.
	c2 := groupcommit.Start(8, time.Second, func(context.Context, []string) ([]string, error) { return nil, nil })
	defer c2.Close()
	if _, err := c2.Do(context.Background(), "x"); err == nil {
		t.Error("a write that returned no result answered nil")
	}
}

// The write runs on its own context: a caller that gives up after the
// hand-over still waits for it (its answer must follow a durable write),
// and the write is not cut short.
func TestAHandedOverItemIsWrittenWhateverItsCallerDoes(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var sawCanceled bool
	var once sync.Once
	c := groupcommit.Start(8, 5*time.Second, func(ctx context.Context, vs []int) ([]int, error) {
		once.Do(func() { close(started) })
		<-release
		sawCanceled = ctx.Err() != nil
		return vs, nil
	})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, 1)
		done <- err
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Do returned (%v) before its write finished", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("Do after its write: %v", err)
	}
	if sawCanceled {
		t.Error("the write saw its caller's cancellation")
	}
	// A caller whose context is done before the hand-over writes nothing.
	if _, err := c.Do(ctx, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a canceled context: %v, want context.Canceled", err)
	}
}

// Close writes what was handed over; after it, Do answers ErrClosed.
func TestCloseWritesWhatWasHandedOverAndRefusesTheRest(t *testing.T) {
	var mu sync.Mutex
	var got []int
	gate := make(chan struct{})
	c := groupcommit.Start(1, time.Second, func(_ context.Context, vs []int) ([]int, error) {
		<-gate
		mu.Lock()
		got = append(got, vs...)
		mu.Unlock()
		return vs, nil
	})
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := c.Do(context.Background(), i)
			errs <- err
		}()
	}
	// Both handed over: one in the blocked write, one waiting in line.
	time.Sleep(50 * time.Millisecond)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	close(gate)
	<-closed
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("an item handed over before Close: %v", err)
		}
	}
	mu.Lock()
	if len(got) != 2 {
		t.Errorf("written %v, want both items", got)
	}
	mu.Unlock()
	if _, err := c.Do(context.Background(), 3); !errors.Is(err, groupcommit.ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
