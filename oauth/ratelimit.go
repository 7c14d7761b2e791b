package oauth

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// keyedLimiters bounds how many keys keep a bucket: beyond it the least
// recently seen key starts again with a full one, which only a flood of
// distinct addresses can cause.
const keyedLimiters = 10000

// keyedLimiter is a token bucket per key (a client address, a user name):
// perMinute requests a minute, a minute's worth at once.
type keyedLimiter struct {
	every rate.Limit
	burst int
	mu    sync.Mutex // guards m: a get and the add after it are one step
	m     *simplelru.LRU[string, *rate.Limiter]
}

// newKeyedLimiter returns nil (no limit) for perMinute < 0.
func newKeyedLimiter(perMinute int) *keyedLimiter {
	if perMinute < 0 {
		return nil
	}
	m, _ := simplelru.NewLRU[string, *rate.Limiter](keyedLimiters, nil) // size > 0 cannot fail
	return &keyedLimiter{every: rate.Limit(float64(perMinute) / 60), burst: perMinute, m: m}
}

// allow takes a request from key's bucket, or says how long until one
// would pass.
func (k *keyedLimiter) allow(key string) (bool, time.Duration) {
	if k == nil {
		return true, 0
	}
	k.mu.Lock()
	lim, ok := k.m.Get(key)
	if !ok {
		lim = rate.NewLimiter(k.every, k.burst)
		k.m.Add(key, lim)
	}
	k.mu.Unlock()
	now := time.Now()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sparseLog writes at most a few lines a second of a kind that anyone can
// make for free (refused requests) and counts the rest: each line it
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
