package broker

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"

	"github.com/toolbus/toolbus/internal/netsrc"
)

// loginThrottle slows down password guessing without handing one or two
// guessing addresses a way to lock an agent out.
//
// Each failed login spends a token of three buckets: its (username,
// source) pair's, its source's, and its username's. A login is refused at
// once, without the KDF, when any of the three is empty. The pair's and
// the source's hold back one address guessing one username, or many.
// The username's bucket caps guesses spread over many addresses (an IPv6
// /48 holds 65 536 sources, each with its own pair and source buckets):
// whatever their number, they get its burst, then its refill. That refill
// is twice a source's own (itself three times a pair's), so no single
// source, nor two, can drain it: the agent logging in from another
// address is locked out only by guessers at several addresses at once.
// Successful logins spend nothing, and a login the cache of recent ones
// knows (a client reconnecting) is never throttled.
//
// A source is an IPv4 address or an IPv6 /64 (netsrc.Key). An agent that
// shares its address with the guesser (the same host, the same NAT) shares
// its pair's bucket too; the login cache still lets it reconnect.
type loginThrottle struct {
	pair, source, user                rate.Limit
	pairBurst, sourceBurst, userBurst int
	now                               func() time.Time // time.Now; a test's clock

	mu      sync.Mutex
	users   *simplelru.LRU[string, *rate.Limiter]
	sources *simplelru.LRU[string, *rate.Limiter]
	pairs   *simplelru.LRU[string, *rate.Limiter]
}

// throttleKeys bounds the buckets kept of each kind; the least recently
// used go first (a full bucket again, which only a guesser with that many
// names or addresses gains from). Apart, so that a guesser trying many
// usernames cannot push the buckets of sources out.
const throttleKeys = 16384

func newLoginThrottle(o Options) *loginThrottle {
	// size > 0: no errors
	users, _ := simplelru.NewLRU[string, *rate.Limiter](throttleKeys, nil)
	sources, _ := simplelru.NewLRU[string, *rate.Limiter](throttleKeys, nil)
	pairs, _ := simplelru.NewLRU[string, *rate.Limiter](throttleKeys, nil)
	return &loginThrottle{
		pair:        rate.Every(o.FailedLoginRefill),
		source:      rate.Every(o.FailedLoginRefill / 3),
		user:        rate.Every(o.FailedLoginRefill / 6),
		pairBurst:   o.MaxFailedLogins,
		sourceBurst: 3 * o.MaxFailedLogins,
		userBurst:   10 * o.MaxFailedLogins,
		now:         time.Now,
		users:       users,
		sources:     sources,
		pairs:       pairs,
	}
}

func limiter(l *simplelru.LRU[string, *rate.Limiter], key string, r rate.Limit, burst int) *rate.Limiter {
	b, ok := l.Get(key)
	if !ok {
		b = rate.NewLimiter(r, burst)
		l.Add(key, b)
	}
	return b
}

// pairKey joins a username and a source; no username holds a space.
func pairKey(username, src string) string { return username + " " + src }

// allow reports whether a login of username from remote may spend the KDF.
func (t *loginThrottle) allow(username, remote string) bool {
	src := netsrc.Key(remote)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	return !empty(t.sources, src, now) && !empty(t.pairs, pairKey(username, src), now) && !empty(t.users, username, now)
}

// empty reports whether key's bucket in l is known and has no token left.
func empty(l *simplelru.LRU[string, *rate.Limiter], key string, now time.Time) bool {
	b, ok := l.Get(key)
	return ok && b.TokensAt(now) < 1
}

// failed spends a token of username's bucket, of remote's source's and of
// their pair's.
func (t *loginThrottle) failed(username, remote string) {
	src := netsrc.Key(remote)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	limiter(t.users, username, t.user, t.userBurst).AllowN(now, 1)
	limiter(t.sources, src, t.source, t.sourceBurst).AllowN(now, 1)
	limiter(t.pairs, pairKey(username, src), t.pair, t.pairBurst).AllowN(now, 1)
}
