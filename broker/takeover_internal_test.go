package broker

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestEndSignal: the function runs once, however many ends and from
// however many goroutines, and an end before the function is set does
// not use it up.
func TestEndSignal(t *testing.T) {
	var e endSignal
	e.end() // a Close before connBegan: nothing to call yet
	var calls atomic.Int32
	e.onEnding(func() { calls.Add(1) })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(e.end)
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("called %d times, want once", n)
	}
}
