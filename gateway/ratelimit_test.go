package gateway

import (
	"errors"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    Limit
		wantErr bool
	}{
		{in: "", want: Limit{}},
		{in: "0", want: Limit{}},
		{in: "600", want: Limit{PerMinute: 600}},
		{in: "600:50", want: Limit{PerMinute: 600, Burst: 50}},
		{in: " 1.5:1 ", want: Limit{PerMinute: 1.5, Burst: 1}},
		{in: "600:0", wantErr: true},
		{in: "600:x", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "fast", wantErr: true},
		{in: "Inf", wantErr: true},
		{in: "NaN", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLimit(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrLimitSyntax) {
					t.Fatalf("ParseLimit(%q) error = %v, want ErrLimitSyntax", tc.in, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseLimit(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestLimitersBurstThenRefusal: a key gets its burst, then a refusal with
// a wait no longer than one request's interval; other keys are apart; a
// nil set (no limit) lets everything through.
func TestLimitersBurstThenRefusal(t *testing.T) {
	ls := newLimiters(Limit{PerMinute: 60, Burst: 3})
	for i := range 3 {
		if ok, _ := ls.allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := ls.allow("a")
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("4th request: ok=%v wait=%v, want refused with 0 < wait <= 1s", ok, wait)
	}
	if ok, _ := ls.allow("b"); !ok {
		t.Fatal("another key was refused")
	}
	ls.sweep(time.Now().Add(time.Hour))
	if n := len(ls.m); n != 0 {
		t.Fatalf("%d buckets left after they all refilled", n)
	}
	var none *limiters
	if ok, _ := none.allow("a"); !ok {
		t.Fatal("no limit refused a request")
	}
	if newLimiters(Limit{}) != nil {
		t.Fatal("the zero Limit built a limiter")
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 59 * time.Second: 59} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
