package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestDriveSchedule checks the open loop's schedule itself: with rate r and
// n goroutines, goroutine i's k-th call is due at start + (k*n + i)/r, so
// the dues of all goroutines interleave at 1/r, however late each call
// runs. (It reads the dues drive hands out, not clocks.)
func TestDriveSchedule(t *testing.T) {
	const n, calls, rate = 4, 40, 2000.0 // 1/rate = 500µs, each goroutine every 2ms
	var mu sync.Mutex
	dues := map[int][]time.Time{}
	drive(testContext(t), n, calls, 0, rate, func(i int, due time.Time) {
		if now := time.Now(); now.Before(due) {
			t.Errorf("goroutine %d called %v before its call was due", i, due.Sub(now))
		}
		if i == 0 {
			time.Sleep(3 * time.Millisecond) // goroutine 0 falls behind
		}
		mu.Lock()
		dues[i] = append(dues[i], due)
		mu.Unlock()
	})
	total := 0
	period := time.Duration(float64(n) / rate * float64(time.Second))
	for i := range n {
		total += len(dues[i])
		for k, d := range dues[i] {
			if d.IsZero() {
				t.Fatalf("goroutine %d call %d has no due time", i, k)
			}
			if k > 0 {
				if gap := d.Sub(dues[i][k-1]); gap != period {
					t.Errorf("goroutine %d: calls %d and %d due %v apart, want %v", i, k-1, k, gap, period)
				}
			}
		}
		if i > 0 && len(dues[i]) > 0 && len(dues[0]) > 0 {
			if off := dues[i][0].Sub(dues[0][0]); off != period*time.Duration(i)/n {
				t.Errorf("goroutine %d starts %v after goroutine 0, want %v", i, off, period*time.Duration(i)/n)
			}
		}
	}
	if total != calls {
		t.Errorf("%d calls, want %d", total, calls)
	}

	// Unpaced, no call has a due time.
	drive(testContext(t), 2, 10, 0, 0, func(_ int, due time.Time) {
		if !due.IsZero() {
			t.Errorf("unpaced call due at %v", due)
		}
	})
}

// TestHarnessPaced runs a paced load against a real server: the calls are
// spread over the duration instead of made as fast as possible, and the
// rate is reported.
func TestHarnessPaced(t *testing.T) {
	srv := startBaseline(t, BaselineBare)
	lo := tinyLoad(srv.URL())
	lo.Calls, lo.Duration, lo.Rate = 0, 500*time.Millisecond, 200
	r, err := Run(testContext(t), lo)
	if err != nil {
		t.Fatal(err)
	}
	checkWellFormed(t, r, r.Calls)
	// 100 calls are due in 500ms (4 workers, 25 each); a late one is made
	// at once, so only a machine that stalls a worker past the end loses
	// one. Unpaced, the bare server makes them in a few milliseconds.
	if r.Calls > 100 || r.Calls < 90 {
		t.Errorf("%d calls in 500ms at 200/s, want 100", r.Calls)
	}
	if r.ElapsedSeconds < 0.45 {
		t.Errorf("the calls took %.3fs, want them spread over 500ms", r.ElapsedSeconds)
	}
	if r.Rate != 200 {
		t.Errorf("rate reported %v, want 200", r.Rate)
	}

	for _, bad := range []float64{-1, 1 / zero()} {
		lo.Rate = bad
		if _, err := Run(context.Background(), lo); err == nil {
			t.Errorf("Rate %v accepted", bad)
		}
		if _, err := RunMQTTFloor(context.Background(), MQTTFloorOptions{BrokerURL: "tcp://127.0.0.1:1", Load: lo}); err == nil || errors.Is(err, ErrSetup) {
			t.Errorf("MQTT floor: Rate %v: %v, want it refused before connecting", bad, err)
		}
	}
	lo.Rate, lo.Cold = 200, true
	if _, err := Run(context.Background(), lo); err == nil {
		t.Error("Rate with Cold accepted")
	}
}

func zero() float64 { return 0 }
