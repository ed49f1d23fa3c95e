package sqlite

import "testing"

// TestChunkSizesCoverEveryRowWithFewShapes: the group commit's batches of
// any size are written with statements of power-of-two sizes only (so a
// handful are prepared once), and the chunks cover every row exactly once.
func TestChunkSizesCoverEveryRowWithFewShapes(t *testing.T) {
	shapes := map[int]bool{}
	for n := 0; n <= 3*insertChunk+7; n++ {
		sum := 0
		for start, size := range chunkStarts(chunkSizes(n)) {
			if start != sum {
				t.Fatalf("n=%d: a chunk starts at %d, want %d", n, start, sum)
			}
			if size <= 0 || size > insertChunk || size&(size-1) != 0 {
				t.Fatalf("n=%d: chunk size %d is not a power of two up to %d", n, size, insertChunk)
			}
			shapes[size] = true
			sum += size
		}
		if sum != n {
			t.Fatalf("n=%d: the chunks cover %d rows", n, sum)
		}
	}
	if len(shapes) != 9 {
		t.Fatalf("%d statement shapes, want 9 (1, 2, 4, ... %d)", len(shapes), insertChunk)
	}
}
