// Package ratelimit holds the per-key token buckets that bound sign-in
// attempts and other cheap-to-send requests per client address and per
// user name: the OAuth server's and the console's.
package ratelimit

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// MaxKeys bounds how many keys keep a bucket: beyond it the least
// recently seen key starts again with a full one, which only a flood of
// distinct addresses can cause.
const MaxKeys = 10000

// Keyed is a token bucket per key (a client address, a user name):
// perMinute requests a minute, a minute's worth at once. A nil *Keyed
// allows everything.
type Keyed struct {
	every rate.Limit
	burst int
	mu    sync.Mutex // guards m: a get and the add after it are one step
	m     *simplelru.LRU[string, *rate.Limiter]
}

// NewKeyed returns nil (no limit) for perMinute < 0.
func NewKeyed(perMinute int) *Keyed {
	if perMinute < 0 {
		return nil
	}
	m, _ := simplelru.NewLRU[string, *rate.Limiter](MaxKeys, nil) // size > 0 cannot fail
	return &Keyed{every: rate.Limit(float64(perMinute) / 60), burst: perMinute, m: m}
}

// Allow takes a request from key's bucket, or says how long until one
// would pass.
func (k *Keyed) Allow(key string) (bool, time.Duration) {
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
