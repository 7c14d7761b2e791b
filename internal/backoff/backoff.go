// Package backoff retries an operation with a doubling wait: the first
// connection of an agent or a gateway to a broker that is not up yet.
package backoff

import (
	"context"
	"fmt"
	"time"
)

// Retry calls try until it returns nil, ctx is done, or giveUp has passed
// since the first call (0: never give up; negative: one attempt only).
// After each failure but the last it calls failed with the attempt's
// number, its error and the wait before the next attempt, then waits:
// first, doubled after each failure up to max. It returns the number of
// attempts made and nil, or the last attempt's error, wrapped with ctx's
// error or with "gave up after" when those ended the tries.
func Retry(ctx context.Context, first, max, giveUp time.Duration, try func() error,
	failed func(attempt int, err error, wait time.Duration)) (int, error) {
	var deadline <-chan time.Time
	if giveUp > 0 {
		t := time.NewTimer(giveUp)
		defer t.Stop()
		deadline = t.C
	}
	wait := first
	for attempt := 1; ; attempt++ {
		err := try()
		if err == nil {
			return attempt, nil
		}
		if ctx.Err() != nil || giveUp < 0 {
			return attempt, err
		}
		failed(attempt, err, wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-deadline:
			t.Stop()
			return attempt, fmt.Errorf("gave up after %s: %w", giveUp, err)
		case <-t.C:
		}
		wait = min(2*wait, max)
	}
}
