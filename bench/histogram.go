package bench

import (
	"math"
	"math/bits"
	"time"
)

// histogram records latencies in log-linear buckets: exact below 128 ns, then
// 128 buckets per power of two, so any percentile it reports is within 1 % of
// the true value while its size stays fixed however long the run is.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    uint64
	max    uint64
	min    uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

func histBucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits - 1 // v>>e is in [histSub, 2*histSub)
	return (e+1)<<histSubBits + int(v>>e) - histSub
}

// histValue is the midpoint of bucket i.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := i>>histSubBits - 1
	lo := uint64(i&(histSub-1)+histSub) << e
	return lo + (uint64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histBucket(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the latency at or below which a fraction q of the
// samples lie (0 for an empty histogram), clamped to [min, max].
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := min(max(histValue(i), h.min), h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}
