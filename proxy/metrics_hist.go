package proxy

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// latBuckets is the number of latency buckets: bucket k < latBuckets-1
// counts durations below 2^k µs (1µs .. ~1.05s), the last one the rest.
const latBuckets = 22

// latencyHist is a lock-free log2 histogram of call latencies; observe is
// two atomic adds. Its count is the number of calls finished.
type latencyHist struct {
	b     [latBuckets]atomic.Uint64
	sumNs atomic.Uint64
}

func (h *latencyHist) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	k := bits.Len64(uint64(d / time.Microsecond))
	if k >= latBuckets {
		k = latBuckets - 1
	}
	h.b[k].Add(1)
	h.sumNs.Add(uint64(d))
}

// latencySnap is a histogram snapshot; counts are per bucket (not
// cumulative).
type latencySnap struct {
	b     [latBuckets]uint64
	sumNs uint64
}

func (h *latencyHist) snapshot() latencySnap {
	var s latencySnap
	for i := range h.b {
		s.b[i] = h.b[i].Load()
	}
	s.sumNs = h.sumNs.Load()
	return s
}

func (s *latencySnap) add(o latencySnap) {
	for i := range s.b {
		s.b[i] += o.b[i]
	}
	s.sumNs += o.sumNs
}

func (s latencySnap) count() uint64 {
	var n uint64
	for _, c := range s.b {
		n += c
	}
	return n
}

// latencyUpperBound is bucket k's upper bound in seconds (k < latBuckets-1).
func latencyUpperBound(k int) float64 {
	return float64(uint64(1)<<k) * 1e-6
}
