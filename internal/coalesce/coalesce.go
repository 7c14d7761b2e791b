// Package coalesce decides when a writer that shares a connection with
// other goroutines yields before it writes, so that under load one write
// carries several packets, and one call at a time pays nothing for it.
//
// The gateway's requests to an agent come from as many HTTP handler
// goroutines, and an agent's replies from as many workers. A writer that
// queues its packet and yields once (runtime.Gosched) lets the goroutines
// runnable at that moment queue theirs, and the first one back writes them
// all: one write and one wake-up of the peer for several calls. A yield is
// not free, though: the scheduler wakes an idle thread for the yielded
// goroutine, which one call at a time costs CPU and latency for nothing.
// A Switch keeps the yields on while writes have been carrying several
// packets.
package coalesce

import "sync/atomic"

const (
	// Off is how many writes of one packet in a row turn the yields off.
	// Under load some writes carry one even with the yields on; one call at
	// a time, every write does.
	Off = 16
	// Probe: while off, one write in Probe yields all the same. Only a
	// yield lets writers meet when they share one P (GOMAXPROCS=1, the
	// default in a one-CPU container): there the yields, once off, would
	// never come back on under load.
	Probe = 64
)

// A Switch tells writers whether to yield. Its zero value is on. It is
// safe for concurrent use; its count is approximate under races, which
// only moves a switch a write early or late.
type Switch struct {
	lone atomic.Int32 // writes in a row that carried one packet; from Off it counts to Off+Probe and starts again
}

// Yield reports whether a writer yields before it writes: while on, and
// for one write in Probe while off.
func (s *Switch) Yield() bool {
	l := s.lone.Load()
	return l < Off || l == Off+Probe-1
}

// On reports whether the yields are on (not counting the probes).
func (s *Switch) On() bool { return s.lone.Load() < Off }

// Wrote notes a write that carried n packets: more than one turns the
// yields on, one counts toward turning them off, none is no news.
func (s *Switch) Wrote(n int) {
	switch {
	case n > 1:
		s.lone.Store(0)
	case n == 1:
		if s.lone.Add(1) >= Off+Probe {
			s.lone.Store(Off)
		}
	}
}
