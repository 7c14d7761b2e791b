package broker

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// loginThrottle slows down password guessing. Each failed login spends a
// token of its username's bucket and one of its source address's; a login
// whose username or source has none left is refused at once, without the
// KDF, until they refill. Successful logins spend nothing, and a login the
// cache of recent ones knows (a client reconnecting) is never throttled.
type loginThrottle struct {
	perUser, perSource rate.Limit
	userBurst          int
	sourceBurst        int

	mu      sync.Mutex
	buckets *simplelru.LRU[string, *rate.Limiter] // "u:" + username, "s:" + source
}

// throttleKeys bounds the buckets kept; the least recently used go first
// (a full bucket again, which only a guesser with that many names gains
// from).
const throttleKeys = 16384

func newLoginThrottle(o Options) *loginThrottle {
	buckets, _ := simplelru.NewLRU[string, *rate.Limiter](throttleKeys, nil) // size > 0: no error
	return &loginThrottle{
		perUser:     rate.Every(o.FailedLoginRefill),
		perSource:   rate.Every(o.FailedLoginRefill / 3),
		userBurst:   o.MaxFailedLogins,
		sourceBurst: 3 * o.MaxFailedLogins,
		buckets:     buckets,
	}
}

func (t *loginThrottle) bucket(key string, r rate.Limit, burst int) *rate.Limiter {
	b, ok := t.buckets.Get(key)
	if !ok {
		b = rate.NewLimiter(r, burst)
		t.buckets.Add(key, b)
	}
	return b
}

// allow reports whether a login of username from remote may spend the KDF.
func (t *loginThrottle) allow(username, remote string) bool {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bucket("u:"+username, t.perUser, t.userBurst).TokensAt(now) >= 1 &&
		t.bucket("s:"+source(remote), t.perSource, t.sourceBurst).TokensAt(now) >= 1
}

// failed spends a token of username's bucket and of remote's.
func (t *loginThrottle) failed(username, remote string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bucket("u:"+username, t.perUser, t.userBurst).AllowN(now, 1)
	t.bucket("s:"+source(remote), t.perSource, t.sourceBurst).AllowN(now, 1)
}

// source is the IP address of a host:port remote address.
func source(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// sparseLog writes at most a few lines a second of a kind that an attacker
// can make for free (refused logins) and counts the rest: each line it
// writes says how many it left out since the one before.
type sparseLog struct {
	lim     *rate.Limiter
	skipped atomic.Int64
}

// newSparseLog writes perSecond lines a second, burst at once.
func newSparseLog(perSecond rate.Limit, burst int) *sparseLog {
	return &sparseLog{lim: rate.NewLimiter(perSecond, burst)}
}

// entry returns the entry to write, with the count of the lines left out
// before it, or nil when this line is to be left out.
func (s *sparseLog) entry(log *logrus.Entry) *logrus.Entry {
	if !s.lim.Allow() {
		s.skipped.Add(1)
		return nil
	}
	if n := s.skipped.Swap(0); n > 0 {
		return log.WithField("notLoggedBefore", n)
	}
	return log
}
