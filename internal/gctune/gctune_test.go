package gctune_test

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/gctune"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		floor, live int64
		base, want  int
	}{
		{"small heap: goal at the floor", 64 * mib, 8 * mib, 100, 700},
		{"heap at half the floor: base", 64 * mib, 32 * mib, 100, 100},
		{"heap past the floor: base", 64 * mib, 200 * mib, 100, 100},
		{"a higher base is kept", 64 * mib, 16 * mib, 400, 400},
		{"nearly empty heap: the runtime's minimum goal at the floor", 64 * mib, 1, 100, 1600},
		{"no live reading", 64 * mib, 0, 100, 1600}, // run never asks: it waits for a reading
		{"floor under the runtime's minimum: base", 2 * mib, 1, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gctune.Percent(tc.floor, tc.live, tc.base); got != tc.want {
				t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.floor, tc.live, tc.base, got, tc.want)
			}
		})
	}
}

// gcPercent reads the runtime's GC percent (setting it is the only way).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestTunerRaisesAndRestores(t *testing.T) {
	// Not parallel: the GC percent belongs to the process.
	before := gcPercent()
	tu := gctune.Start(gctune.Options{Floor: 1 << 30, Interval: time.Millisecond})
	t.Cleanup(tu.Close)
	deadline := time.Now().Add(10 * time.Second)
	runtime.GC() // the tuner waits for a measured live heap
	for tu.GCPercent() <= before {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent still %d after 10s, want above %d (a test's live heap is far below 1 GiB)", tu.GCPercent(), before)
		}
		time.Sleep(time.Millisecond)
	}
	if got, want := gcPercent(), tu.GCPercent(); got != want {
		t.Errorf("runtime GC percent %d, tuner says %d", got, want)
	}
	tu.Close()
	if got := gcPercent(); got != before {
		t.Errorf("after Close GC percent = %d, want %d restored", got, before)
	}
}

func TestTunerLeavesGCAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		floor int64
		gogc  string // "" = unset
	}{
		{"no floor", 0, ""},
		{"GOGC set by the operator", 1 << 30, "150"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.gogc != "" {
				t.Setenv("GOGC", tc.gogc)
			}
			before := gcPercent()
			tu := gctune.Start(gctune.Options{Floor: tc.floor, Interval: time.Millisecond})
			time.Sleep(20 * time.Millisecond)
			if got := tu.GCPercent(); got != -1 {
				t.Errorf("GCPercent() = %d, want -1 (not tuning)", got)
			}
			if got := gcPercent(); got != before {
				t.Errorf("GC percent = %d, want %d untouched", got, before)
			}
			tu.Close()
			tu.Close() // twice is fine
		})
	}
}
