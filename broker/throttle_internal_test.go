package broker

import (
	"fmt"
	"testing"
	"time"
)

// guess is a login with a wrong password: refused at once when the
// throttle says so, else a failure.
func guess(th *loginThrottle, username, remote string) bool {
	if !th.allow(username, remote) {
		return false
	}
	th.failed(username, remote)
	return true
}

// stopClock makes th's clock stand still; the returned func moves it on.
func stopClock(th *loginThrottle) (advance func(time.Duration)) {
	now := time.Now()
	th.now = func() time.Time { return now }
	return func(d time.Duration) { now = now.Add(d) }
}

// Failures from one address hold back that address only; guesses spread
// over many addresses hold back every address once the username's own
// bucket is spent.
func TestLoginThrottle(t *testing.T) {
	const user = "agent1"
	// spread guesses for user from 20 addresses, as often as each may:
	// 3 each until the username's 30 are spent.
	spread := func(th *loginThrottle) {
		for i := range 20 {
			for guess(th, user, fmt.Sprintf("127.0.1.%d:1000", i)) {
			}
		}
	}
	for _, tc := range []struct {
		name       string
		fail       func(th *loginThrottle, advance func(time.Duration))
		user, from string
		want       bool
	}{
		{"another address than the guesser's", func(th *loginThrottle, _ func(time.Duration)) {
			for range 100 {
				guess(th, user, "127.0.0.2:1000")
			}
		}, user, "127.0.0.3:2000", true},
		{"the guesser's address", func(th *loginThrottle, _ func(time.Duration)) {
			for range 3 {
				guess(th, user, "127.0.0.2:1000")
			}
		}, user, "127.0.0.2:1001", false},
		{"the guesser's /64", func(th *loginThrottle, _ func(time.Duration)) {
			for range 3 {
				guess(th, user, "[2001:db8::1]:1000")
			}
		}, user, "[2001:db8::2]:1000", false},
		{"the guesser's address across usernames", func(th *loginThrottle, _ func(time.Duration)) {
			for i := range 9 {
				guess(th, fmt.Sprintf("user%d", i), "127.0.0.2:1000")
			}
		}, user, "127.0.0.2:1001", false},
		{"a new address after a spread guesser", func(th *loginThrottle, _ func(time.Duration)) {
			spread(th)
		}, user, "127.0.2.1:1000", false},
		{"a new IPv6 /64 after a spread guesser", func(th *loginThrottle, _ func(time.Duration)) {
			spread(th)
		}, user, "[2001:db8:0:1::1]:1000", false},
		{"another username after a spread guesser", func(th *loginThrottle, _ func(time.Duration)) {
			spread(th)
		}, "agent2", "127.0.2.1:1000", true},
		{"a new address once the username's bucket refilled", func(th *loginThrottle, advance func(time.Duration)) {
			spread(th)
			advance(time.Hour / 6) // one token of the username's
		}, user, "127.0.2.1:1000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := newLoginThrottle(Options{MaxFailedLogins: 3, FailedLoginRefill: time.Hour})
			tc.fail(th, stopClock(th))
			if got := th.allow(tc.user, tc.from); got != tc.want {
				t.Errorf("allow %s from %s = %v, want %v", tc.user, tc.from, got, tc.want)
			}
		})
	}
}

// With the default options, one or two addresses guessing as fast as the
// throttle lets them never lock the username out for another address;
// many addresses together get the username's burst and then about one
// guess per FailedLoginRefill/6, however many they are.
func TestLoginThrottleOverTime(t *testing.T) {
	const (
		user = "agent1"
		step = 500 * time.Millisecond
		span = 10 * time.Minute
	)
	for _, tc := range []struct {
		name       string
		guessers   int
		locksOut   bool
		maxGuesses int // the most guesses that may reach the KDF over span
	}{
		{"one address", 1, false, DefaultMaxFailedLogins + int(span/DefaultFailedLoginRefill) + 1},
		{"two addresses", 2, false, 2 * (DefaultMaxFailedLogins + int(span/DefaultFailedLoginRefill) + 1)},
		{"200 addresses", 200, true, 10*DefaultMaxFailedLogins + int(span/(DefaultFailedLoginRefill/6)) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := newLoginThrottle(Options{MaxFailedLogins: DefaultMaxFailedLogins, FailedLoginRefill: DefaultFailedLoginRefill})
			advance := stopClock(th)
			guesses, lockedOut := 0, false
			for elapsed := time.Duration(0); elapsed < span; elapsed += step {
				for i := range tc.guessers {
					if guess(th, user, fmt.Sprintf("127.0.%d.%d:1000", i/256, i%256)) {
						guesses++
					}
				}
				lockedOut = lockedOut || !th.allow(user, "10.0.0.1:1000")
				advance(step)
			}
			if lockedOut != tc.locksOut {
				t.Errorf("another address locked out: %v, want %v", lockedOut, tc.locksOut)
			}
			if guesses > tc.maxGuesses {
				t.Errorf("%d guesses reached the KDF in %v, want at most %d", guesses, span, tc.maxGuesses)
			}
		})
	}
}
