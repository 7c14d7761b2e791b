package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// DefaultTokenCacheTTL is how long AuthenticateToken trusts a token row it
// has read, when StoreOptions.TokenCacheTTL is 0. It bounds how late a
// revocation made by another process (the CLI) takes effect.
const DefaultTokenCacheTTL = 2 * time.Second

// tokenCacheSize bounds the token cache. Tokens are minted by operators, so
// this holds every live token of a normal deployment; beyond it the least
// recently used rows are read again.
const tokenCacheSize = 4096

// tokenAuth is the Store's token authentication state: the row cache and
// the LastUsed writer.
type tokenAuth struct {
	ttl time.Duration // how long a cached row is trusted

	// Hits only Peek (no recency update), so they share a read lock. Recency
	// is then the time of the last (re)load, which happens every ttl for a
	// token in use: close enough to LRU for a cache this large.
	mu    sync.RWMutex
	cache *simplelru.LRU[string, *tokenEntry] // token ID -> row; nil when disabled
	// gen counts invalidations. A row read while an invalidation happened
	// may predate the write that caused it, so it is not cached.
	gen uint64
	// changed is closed, and replaced, at each invalidation (TokensChanged).
	changed chan struct{}

	loads atomic.Int64 // rows read by AuthenticateToken; tests read it to see cache hits
	usage usageWriter
}

// tokenEntry is a cached token row. Everything but lastUsed is immutable
// once the entry is published.
type tokenEntry struct {
	tokenRow
	loaded   time.Time    // when the read started: the entry is trusted until loaded+ttl
	lastUsed atomic.Int64 // unix ms of the newest use recorded (stored or queued); 0 = never
}

// errCorruptToken marks a stored token row that cannot be decoded.
var errCorruptToken = errors.New("corrupt token row")

// startTokens sets up token authentication; Open calls it once.
func (s *Store) startTokens(ttl time.Duration) {
	if ttl == 0 {
		ttl = DefaultTokenCacheTTL
	}
	s.tokens.ttl = ttl
	s.tokens.changed = make(chan struct{})
	if ttl > 0 {
		s.tokens.cache, _ = simplelru.NewLRU[string, *tokenEntry](tokenCacheSize, nil) // size > 0 cannot fail
	}
	s.startUsageWriter()
}

// AuthenticateToken returns the live token whose secret this is (the bearer
// token of a request). Every refusal wraps ErrUnauthenticated:
// ErrTokenInvalid for a malformed, unknown or wrong secret, ErrTokenRevoked,
// ErrTokenExpired. Revocation and expiry are reported only to a caller who
// holds the right secret. Other errors (the database failing) do not wrap
// ErrUnauthenticated: the caller is not at fault.
//
// It runs on every MCP request. A token row read from the database is
// trusted for StoreOptions.TokenCacheTTL, so most requests cost a SHA-256,
// a constant-time compare and a map lookup, and no SQL. RevokeToken on this
// Store evicts the row at once; a revocation by another process is seen
// when the cached row goes stale. Expiry is checked on every request. The
// use is recorded in LastUsed at most once a minute per token, by a
// goroutine of the Store, never on the request's path.
func (s *Store) AuthenticateToken(ctx context.Context, secret string) (Token, error) {
	id, ok := parseSecret(secret)
	if !ok {
		return Token{}, ErrTokenInvalid
	}
	sum := hashSecret(secret)
	now := time.Now()
	e, err := s.lookupToken(ctx, id, now)
	if err != nil {
		return Token{}, err
	}
	if e == nil || subtle.ConstantTimeCompare(e.hash[:], sum[:]) != 1 {
		return Token{}, ErrTokenInvalid
	}
	nowMs := now.UnixMilli()
	if e.revokedMs != 0 {
		return Token{}, fmt.Errorf("token %s: %w", id, ErrTokenRevoked)
	}
	if e.expiresMs != 0 && nowMs >= e.expiresMs {
		return Token{}, fmt.Errorf("token %s: %w", id, ErrTokenExpired)
	}
	tok := e.tok
	tok.LastUsed = fromMillis(s.noteTokenUse(e, nowMs))
	return tok, nil
}

// lookupToken returns the row of token id, from the cache while it is fresh,
// else from the database; nil when there is no such token.
func (s *Store) lookupToken(ctx context.Context, id string, now time.Time) (*tokenEntry, error) {
	a := &s.tokens
	var gen uint64
	if a.cache != nil {
		a.mu.RLock()
		e, ok := a.cache.Peek(id)
		gen = a.gen
		a.mu.RUnlock()
		if ok && now.Sub(e.loaded) < a.ttl {
			return e, nil
		}
	}
	a.loads.Add(1)
	row, err := scanToken(s.db.QueryRowContext(ctx, qSelectToken, id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case errors.Is(err, errCorruptToken):
		s.log.WithField("token", id).WithError(err).Error("stored token is unusable; revoke it and create a new one")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("authenticate token %s: %w", id, err)
	}
	granted, err := s.UserAgents(ctx, row.tok.UserID)
	if err != nil {
		return nil, fmt.Errorf("authenticate token %s: %w", id, err)
	}
	row.tok.Agents = NarrowAgents(row.tok.Agents, granted)
	e := &tokenEntry{tokenRow: row, loaded: now}
	e.lastUsed.Store(max(row.lastMs, a.usage.lastQueued(id)))
	if a.cache != nil {
		a.mu.Lock()
		if a.gen == gen {
			a.cache.Add(id, e)
		}
		a.mu.Unlock()
	}
	return e, nil
}

// invalidateAll drops every cached row (a user's grants changed).
func (a *tokenAuth) invalidateAll() {
	a.mu.Lock()
	a.gen++
	if a.cache != nil {
		a.cache.Purge()
	}
	a.signal()
	a.mu.Unlock()
}

// invalidate drops the cached row of token id. Call it after the write that
// changed the row has committed.
func (a *tokenAuth) invalidate(id string) {
	a.mu.Lock()
	a.gen++
	if a.cache != nil {
		a.cache.Remove(id)
	}
	a.signal()
	a.mu.Unlock()
}

// signal wakes the waiters of TokensChanged; a.mu is held.
func (a *tokenAuth) signal() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// TokensChanged returns a channel closed at the next revocation, deletion
// or change of grants made through this Store, after its write committed:
// whoever holds a token for longer than a request (a listening stream)
// checks it again then, so that a revocation ends it at once. Changes made
// by another process (the CLI on the same data directory, another replica)
// are not signalled: AuthenticateToken sees them within
// StoreOptions.TokenCacheTTL.
func (s *Store) TokensChanged() <-chan struct{} {
	s.tokens.mu.RLock()
	defer s.tokens.mu.RUnlock()
	return s.tokens.changed
}
