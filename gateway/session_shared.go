package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
)

// EndedSessions records the MCP sessions clients ended (DELETE), in a store
// every replica shares (store.Store: the ended_sessions table), so that a
// session ended on one replica is refused by all of them.
type EndedSessions interface {
	// EndSession records key as ended; until is when the record stops
	// mattering (the session's ID could not be presented after it).
	EndSession(ctx context.Context, key string, until time.Time) error
	// SessionEnded reports whether key was recorded as ended.
	SessionEnded(ctx context.Context, key string) (bool, error)
}

// DefaultEndedSessionsCacheTTL is how long a replica trusts the store's
// "not ended" answer for a session when Options.EndedSessionsCacheTTL is 0.
const DefaultEndedSessionsCacheTTL = time.Second

// maxSessionIDLen bounds the session IDs verify looks at; the claims with
// capabilities of claimCaps' size fit well within it.
const maxSessionIDLen = 2048

// maxClaimCaps bounds the client capabilities carried in a session ID.
const maxClaimCaps = 512

// claimCaps is what of the client's capabilities a session ID carries:
// the compacted object when it is small, else only the members the gateway
// acts on, each as {} (their sub-flags are dropped). nil when there is
// nothing to carry.
func claimCaps(caps json.RawMessage) json.RawMessage {
	if len(caps) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, caps) != nil {
		return nil
	}
	if b.Len() <= maxClaimCaps {
		return b.Bytes()
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(caps, &m) != nil {
		return nil
	}
	kept := map[string]json.RawMessage{}
	for _, k := range []string{"roots", "sampling", "elicitation"} {
		if m[k] != nil {
			kept[k] = json.RawMessage(`{}`)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	out, _ := json.Marshal(kept) // three fixed members: cannot fail
	return out
}

// sharedEnded is the sessions' view of the replicas' shared store.
type sharedEnded struct {
	store EndedSessions
	ttl   time.Duration // <= 0: ask the store on every request
	log   *logrus.Entry
}

// shareEnded makes ss check and record ended sessions in store. ttl is
// Options.EndedSessionsCacheTTL (0: the default, negative: no cache); log
// nil discards the warnings.
func (ss *sessions) shareEnded(store EndedSessions, ttl time.Duration, log *logrus.Entry) {
	if store == nil {
		return
	}
	if ttl == 0 {
		ttl = DefaultEndedSessionsCacheTTL
	}
	ss.shared = &sharedEnded{store: store, ttl: ttl, log: logutil.OrDiscard(log)}
}

// checkShared refuses a session that another replica ended. A "not ended"
// answer is trusted for the cache TTL, so a replica asks the store at most
// once per session per TTL. When the store cannot answer, the session is
// served (and a warning logged): the ID is bound to its token, which every
// request still proves, so what an outage risks is serving a session its
// own client gave up, never someone else's.
func (ss *sessions) checkShared(ctx context.Context, s *session) error {
	sh := ss.shared
	if sh == nil {
		return nil
	}
	now := ss.now()
	s.mu.Lock()
	fresh := now.Before(s.sharedUntil)
	s.mu.Unlock()
	if fresh {
		return nil
	}
	ended, err := sh.store.SessionEnded(ctx, s.key)
	if err != nil {
		sh.log.WithError(err).Warn("cannot read ended sessions from the store: serving the session")
		return nil
	}
	if ended {
		ss.end(s) // later lookups here refuse it without asking the store
		return errSessionEnded
	}
	if sh.ttl > 0 {
		s.mu.Lock()
		s.sharedUntil = now.Add(sh.ttl)
		s.mu.Unlock()
	}
	return nil
}

// endShared records a session as ended in the shared store, so that every
// replica refuses it, then ends it here. When the store cannot record it,
// nothing is ended and the error says so: the client may retry the DELETE.
func (ss *sessions) endShared(ctx context.Context, s *session) error {
	if ss.shared != nil {
		// Kept a TTL from now, not from creation: a replica that holds the
		// session live (busy since before another replica ended it) asks
		// the store again within its cache TTL, and must still find the row.
		if err := ss.shared.store.EndSession(ctx, s.key, ss.now().Add(ss.ttl)); err != nil {
			return err
		}
	}
	ss.end(s)
	return nil
}
