package bodybudget

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// countingReader counts what was read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// chunked hides a body's length, as a chunked request does.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestReadByContentLength(t *testing.T) {
	b := New(1 << 20)
	body := bytes.Repeat([]byte("x"), 200<<10)

	// Over the per-request limit: refused, not a byte read.
	cr := &countingReader{r: bytes.NewReader(body)}
	if _, n, err := b.Read(cr, int64(len(body)), 100<<10); !errors.Is(err, ErrTooLarge) || n != 0 || cr.n != 0 {
		t.Fatalf("declared over the limit: reserved %d, read %d, %v; want ErrTooLarge, nothing read", n, cr.n, err)
	}

	// Three fit beside the small bodies' reserve (1 MiB less an eighth);
	// the fourth is refused unread, and a small body still fits.
	var held int64
	for i := range 3 {
		got, n, err := b.Read(bytes.NewReader(body), int64(len(body)), 1<<20)
		if err != nil || !bytes.Equal(got, body) || n != int64(len(body)) {
			t.Fatalf("body %d: %v, read %d bytes, reserved %d", i, err, len(got), n)
		}
		held += n
	}
	cr = &countingReader{r: bytes.NewReader(body)}
	if _, n, err := b.Read(cr, int64(len(body)), 1<<20); !errors.Is(err, ErrBusy) || n != 0 || cr.n != 0 {
		t.Fatalf("the fourth body: %v, reserved %d, read %d; want ErrBusy, nothing read", err, n, cr.n)
	}
	if b.Used() != held {
		t.Fatalf("Used = %d, want %d", b.Used(), held)
	}
	small := []byte(`{"to":"+15551234567","text":"hi"}`)
	got, n, err := b.Read(bytes.NewReader(small), int64(len(small)), 1<<20)
	if err != nil || !bytes.Equal(got, small) {
		t.Fatalf("a small body while large ones fill the budget: %v", err)
	}
	b.Give(n)
	b.Give(held)
	if b.Used() != 0 {
		t.Fatalf("Used = %d after every Give, want 0", b.Used())
	}
}

func TestReadChunked(t *testing.T) {
	b := New(1 << 20)
	body := bytes.Repeat([]byte("y"), 300<<10)
	got, n, err := b.Read(chunked{bytes.NewReader(body)}, -1, 1<<20)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("chunked body: %v", err)
	}
	if n < int64(len(body)) || b.Used() != n {
		t.Fatalf("reserved %d (Used %d) for %d bytes", n, b.Used(), len(body))
	}
	b.Give(n)

	// Past the per-request limit: refused once the reader passes it,
	// having read at most one step more.
	cr := &countingReader{r: bytes.NewReader(body)}
	_, n, err = b.Read(chunked{cr}, -1, 100<<10)
	if !errors.Is(err, ErrTooLarge) || cr.n > 100<<10+1 {
		t.Fatalf("chunked over the limit: %v after %d bytes; want ErrTooLarge by %d", err, cr.n, 100<<10+1)
	}
	b.Give(n)

	// Past the budget: refused as its chunks outgrow the room left.
	_, hn, err := b.Read(bytes.NewReader(body), int64(len(body)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("z"), 1<<20)
	cr = &countingReader{r: bytes.NewReader(big)}
	_, n, err = b.Read(chunked{cr}, -1, 1<<20)
	if !errors.Is(err, ErrBusy) || cr.n >= int64(len(big)) {
		t.Fatalf("chunked past the budget: %v after %d of %d bytes; want ErrBusy before the end", err, cr.n, len(big))
	}
	b.Give(n)
	b.Give(hn)
	if b.Used() != 0 {
		t.Fatalf("Used = %d after every Give, want 0", b.Used())
	}
}

// TestLargestBody: a body of LargestBody fits an empty budget; one byte
// more never does (it would only ever be answered 503).
func TestLargestBody(t *testing.T) {
	for _, limit := range []int64{100, SmallBody, 4 * SmallBody, 1 << 20, 8 << 20, 8<<20 + 7} {
		n := LargestBody(limit)
		b := New(limit)
		_, got, err := b.Read(bytes.NewReader(make([]byte, n)), n, n)
		if err != nil {
			t.Fatalf("limit %d: a body of LargestBody (%d): %v", limit, n, err)
		}
		b.Give(got)
		if _, _, err := b.Read(bytes.NewReader(make([]byte, n+1)), n+1, n+1); !errors.Is(err, ErrBusy) {
			t.Fatalf("limit %d: a body of LargestBody+1 (%d) in an empty budget: %v, want ErrBusy", limit, n+1, err)
		}
	}
}
