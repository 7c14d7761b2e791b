// Package gctune keeps Go's garbage collector from running far more often
// than a small heap needs, for the toolbus commands' --gc-heap-floor-mib
// flags.
//
// With Go's default pacing (GOGC=100) the next collection starts when the
// heap has grown by its live size. A gateway serving tool calls keeps a few
// MiB live and allocates tens of MiB a second, so it collects several times
// a second: on a 2-core machine about a sixth of its CPU went to the
// collector. A heap floor raises the GC percent while the live heap is
// small, so that the next collection starts only when the heap reaches the
// floor; once the live heap is large enough (100 000 contexts, say), the
// percent is back at its base and memory grows as it would without the
// tuner. The cost is bounded: at most the floor in extra heap.
package gctune

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Options configure a Tuner. The zero value of each field has the meaning
// its comment gives.
type Options struct {
	// Floor is the heap size, in bytes, below which no collection starts:
	// while live*(1+base/100) is below it, the GC percent is raised so the
	// heap goal is Floor. 0 or less leaves Go's pacing alone.
	Floor int64
	// Interval is how often the live heap is read (it changes once per
	// collection). 0 means 100ms.
	Interval time.Duration
	// Logger hears when the tuner starts and when it leaves the GC alone
	// because GOGC is set. nil logs nothing.
	Logger *logrus.Entry
}

// runtimeHeapMinimum is the Go runtime's smallest heap goal at GOGC=100
// (defaultHeapMinimum): it scales with the GC percent, so a percent above
// floor/runtimeHeapMinimum*100 would put the goal above the floor however
// small the live heap.
const runtimeHeapMinimum = 4 << 20

// Tuner adjusts the GC percent until Close. Start returns it.
type Tuner struct {
	opts Options
	base int          // the GC percent before Start, restored by Close
	on   bool         // run is tuning
	set  atomic.Int64 // the GC percent run set last
	done chan struct{}
	stop chan struct{}
	once sync.Once
}

// Start starts tuning the GC percent toward opts.Floor. It does nothing
// (but returns a Tuner whose Close does nothing) when opts.Floor is 0 or
// less, or when the GOGC environment variable is set: an operator who set
// GOGC chose the pacing.
func Start(opts Options) *Tuner {
	t := &Tuner{opts: opts, done: make(chan struct{}), stop: make(chan struct{})}
	if opts.Floor <= 0 {
		close(t.done)
		return t
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		if opts.Logger != nil {
			opts.Logger.WithField("GOGC", v).Info("GOGC is set: no GC heap floor")
		}
		close(t.done)
		return t
	}
	if t.opts.Interval <= 0 {
		t.opts.Interval = 100 * time.Millisecond
	}
	t.base = debug.SetGCPercent(100) // the only way to read it
	debug.SetGCPercent(t.base)
	if t.base < 0 { // collection is off (debug.SetGCPercent(-1) in this process)
		close(t.done)
		return t
	}
	t.on = true
	t.set.Store(int64(t.base))
	if opts.Logger != nil {
		opts.Logger.WithField("floor_mib", opts.Floor>>20).Debug("GC heap floor")
	}
	go t.run()
	return t
}

func (t *Tuner) run() {
	defer close(t.done)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tick := time.NewTicker(t.opts.Interval)
	defer tick.Stop()
	last := t.base
	for {
		metrics.Read(sample)
		// The live heap reads 0 until the first collection has measured
		// it; a percent set then would apply to the runtime's initial 4 MiB
		// heap goal, not to a measured heap, and could let the heap grow
		// to many times the floor.
		if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > 0 {
			if p := Percent(t.opts.Floor, int64(sample[0].Value.Uint64()), t.base); p != last {
				debug.SetGCPercent(p)
				t.set.Store(int64(p))
				last = p
			}
		}
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
	}
}

// Percent is the GC percent that puts the heap goal of a live heap of live
// bytes at floor, never below base. It never exceeds the percent at which
// the runtime's minimum heap goal (4 MiB at GOGC=100, scaled by the percent)
// reaches floor: a live heap of a few KiB gets a goal at the floor, not a
// hundred times its size.
func Percent(floor, live int64, base int) int {
	if live <= 0 {
		live = 1
	}
	p := (floor - live) * 100 / live
	p = min(p, floor*100/runtimeHeapMinimum)
	if p < int64(base) {
		return base
	}
	return int(p)
}

// GCPercent is the GC percent the tuner set last; -1 when it is not
// tuning.
func (t *Tuner) GCPercent() int {
	if !t.on {
		return -1
	}
	return int(t.set.Load())
}

// Close stops the tuner and restores the GC percent it found.
func (t *Tuner) Close() {
	t.once.Do(func() {
		close(t.stop)
		<-t.done
		if t.on {
			debug.SetGCPercent(t.base)
		}
	})
}
