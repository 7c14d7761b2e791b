package backoff_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/backoff"
)

var errDown = errors.New("down")

func TestRetry(t *testing.T) {
	t.Run("until it works, the waits doubling up to max", func(t *testing.T) {
		var waits []time.Duration
		n := 0
		attempts, err := backoff.Retry(t.Context(), time.Millisecond, 4*time.Millisecond, 0,
			func() error {
				if n++; n < 5 {
					return errDown
				}
				return nil
			},
			func(_ int, err error, wait time.Duration) { waits = append(waits, wait) })
		if err != nil || attempts != 5 {
			t.Fatalf("Retry = %d, %v", attempts, err)
		}
		if got := fmtDurations(waits); got != "1ms 2ms 4ms 4ms" {
			t.Errorf("waits %s", got)
		}
	})
	t.Run("one attempt", func(t *testing.T) {
		attempts, err := backoff.Retry(t.Context(), time.Millisecond, time.Millisecond, -1, func() error { return errDown },
			func(int, error, time.Duration) { t.Error("failed called for a single attempt") })
		if attempts != 1 || !errors.Is(err, errDown) {
			t.Errorf("Retry = %d, %v", attempts, err)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		_, err := backoff.Retry(t.Context(), time.Millisecond, time.Millisecond, 20*time.Millisecond, func() error { return errDown },
			func(int, error, time.Duration) {})
		if !errors.Is(err, errDown) || !strings.Contains(err.Error(), "gave up after 20ms") {
			t.Errorf("Retry = %v", err)
		}
	})
	t.Run("ctx ends it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		_, err := backoff.Retry(ctx, time.Hour, time.Hour, 0, func() error { return errDown },
			func(int, error, time.Duration) { cancel() })
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "down") {
			t.Errorf("Retry = %v", err)
		}
	})
}

func fmtDurations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, " ")
}
