package main

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split into
// 2^subBits buckets, so a recorded latency is known to within 1/128 (under
// 0.8%) of itself, at any magnitude. That is the HDR histogram's idea (a
// fixed relative error, a fixed size whatever the run's length) without
// its dependency: a run of an hour at 10,000 sends/s keeps the same 7,000
// counters as a run of a second, where sorted samples would keep 36 million.
const (
	subBits  = 7
	subCount = 1 << subBits
	// 64-bit nanoseconds need at most 64-subBits+1 power-of-two groups.
	bucketCount = (64 - subBits + 1) * subCount
)

// histogram counts latencies (nanoseconds) in log-linear buckets. Each
// connection's goroutine keeps its own, merged at the end, so recording
// takes no lock.
type histogram struct {
	counts [bucketCount]uint64
	total  uint64
	max    int64
}

// bucketOf maps v >= 0 to its bucket: values under subCount have a bucket
// each; above, the top subBits+1 significant bits choose the bucket.
func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return (shift+1)*subCount + int(uint64(v)>>shift) - subCount
}

// bucketHigh is the largest value that falls in bucket i.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	shift := i/subCount - 1
	mant := int64(i%subCount + subCount)
	return (mant+1)<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.total++
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile is the smallest recorded bucket's upper edge at or below which a
// fraction q of the samples lie (nearest rank), never above the maximum
// seen: p99 of 100 samples is the 99th smallest.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	// The epsilon keeps 0.99*100 (98.99999999999999 or 99.00000000000001
	// in floating point) at rank 99.
	rank := uint64(math.Ceil(q*float64(h.total) - 1e-9))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max))
		}
	}
	return time.Duration(h.max)
}
