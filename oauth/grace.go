package oauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/toolbus/toolbus/store"
)

// graceEntries bounds the refresh answers kept for RefreshGrace: beyond
// it the oldest go first, and a retry of theirs is refused as any reuse.
const graceEntries = 1000

// refreshGrace lets the same client repeat a refresh for a short while
// (Options.RefreshGrace) and get the same answer, rather than lose its
// grant to reuse detection. Concurrent refreshes of one token by one
// client share one rotation (singleflight); one that comes after it, within
// the grace, gets its tokens again. No new token is minted for a repeat.
//
// A repeat hands out live tokens, so it must come from the client: a
// confidential client proved it with its secret, but a public one (most
// MCP clients, every metadata document's) shows only its client_id, which
// is no secret. A public client's repeat is therefore answered only from
// the address of the refresh it repeats. Any other reuse (another client,
// another resource, a public client's from another address, after the
// grace) goes to the store, which revokes the grant.
//
// The answers are in this process's memory only: a retry that reaches
// another replica is refused as before.
type refreshGrace struct {
	ttl    time.Duration
	now    func() time.Time
	flight singleflight.Group
	cache  *lru.Cache[graceKey, graceAnswer]
	mu     sync.Mutex // makes forget's scan and removals one step
}

// graceKey is the repeat a grace answers: the hash of the refresh token
// presented, the client, the resource and scopes asked for and, for a
// public client, its address (netsrc.Key); "" for a confidential one.
type graceKey struct {
	token                         [sha256.Size]byte
	client, resource, scope, from string
}

type graceAnswer struct {
	toks store.OAuthTokens
	at   time.Time
}

// newRefreshGrace returns nil (no grace) for ttl < 0.
func newRefreshGrace(ttl time.Duration) *refreshGrace {
	if ttl < 0 {
		return nil
	}
	cache, _ := lru.New[graceKey, graceAnswer](graceEntries) // size > 0 cannot fail
	return &refreshGrace{ttl: ttl, now: time.Now, cache: cache}
}

// refresh runs rotate for req once per key at a time, and answers a repeat
// within the grace from memory. from is the address a public client's
// repeat must come from, "" for a confidential client. repeat reports that
// the answer is one given before (to this caller's twin).
func (g *refreshGrace) refresh(ctx context.Context, from string, req store.OAuthRefresh, rotate func(context.Context, store.OAuthRefresh) (store.OAuthTokens, error)) (toks store.OAuthTokens, repeat bool, err error) {
	if g == nil {
		toks, err = rotate(ctx, req)
		return toks, false, err
	}
	k := graceKey{token: sha256.Sum256([]byte(req.Token)), client: req.ClientID, resource: req.Resource,
		scope: strings.Join(req.Scopes, " "), from: from}
	if a, ok := g.answer(k); ok {
		return a, true, nil
	}
	ran := false
	// Quoted, the parts cannot run into each other, whatever a request's
	// resource holds.
	v, err, _ := g.flight.Do(fmt.Sprintf("%x %q %q %q", k.token, k.client, k.resource, k.from), func() (any, error) {
		// A rotation that ended between the look-up above and this call
		// left its answer: use it, not the store, which would revoke.
		if a, ok := g.answer(k); ok {
			return a, nil
		}
		ran = true
		// Not the caller's ctx: the rotation answers every caller
		// waiting on it, and one that gives up must not fail the others.
		t, err := rotate(context.WithoutCancel(ctx), req)
		if err == nil {
			g.cache.Add(k, graceAnswer{toks: t, at: g.now()})
		}
		return t, err
	})
	if err != nil {
		return store.OAuthTokens{}, false, err
	}
	return v.(store.OAuthTokens), !ran, nil
}

// answer returns the answer kept for k, if within the grace.
func (g *refreshGrace) answer(k graceKey) (store.OAuthTokens, bool) {
	a, ok := g.cache.Get(k)
	if !ok || g.now().Sub(a.at) >= g.ttl {
		return store.OAuthTokens{}, false
	}
	return a.toks, true
}

// forget drops the answers that hold token (an access or a refresh token
// just revoked): a revoked grant is not handed out again.
func (g *refreshGrace) forget(token string) {
	if g == nil || token == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range g.cache.Keys() {
		if a, ok := g.cache.Peek(k); ok && (a.toks.Access == token || a.toks.Refresh == token) {
			g.cache.Remove(k)
		}
	}
}
