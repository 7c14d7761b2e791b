package console

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"
)

// session is one signed-in console user.
type session struct {
	id, user string
	// stamp is the user's password stamp at sign-in (store.UserState):
	// a new password ends the session.
	stamp string
	// openID: signed in at the OpenID provider (an admin by group), not
	// with a password of the store.
	openID  bool
	created time.Time
	// ended is closed when the session ends, so its event streams stop.
	ended chan struct{}

	mu       sync.Mutex
	lastUsed time.Time
}

// sessions holds the console's sessions of this process. A restart signs
// everybody out, which is what an operator expects of a security reset.
type sessions struct {
	idle, maxAge time.Duration
	max          int

	mu   sync.Mutex
	byID map[string]*session
}

func newSessions(idle, maxAge time.Duration, max int) *sessions {
	return &sessions{idle: idle, maxAge: maxAge, max: max, byID: map[string]*session{}}
}

// newSessionID is 256 random bits: guessing one is not an attack.
func newSessionID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// add starts a session for user. Expired sessions are dropped first, and
// past max the oldest goes, so a flood of sign-ins holds bounded memory.
func (s *sessions) add(user, stamp string, openID bool, now time.Time) *session {
	ss := &session{id: newSessionID(), user: user, stamp: stamp, openID: openID, created: now, lastUsed: now, ended: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest *session
	for id, o := range s.byID {
		if s.expired(o, now) {
			s.endLocked(id)
			continue
		}
		if oldest == nil || o.created.Before(oldest.created) {
			oldest = o
		}
	}
	if len(s.byID) >= s.max && oldest != nil {
		s.endLocked(oldest.id)
	}
	s.byID[ss.id] = ss
	return ss
}

// get returns the live session of id and marks it used; nil if none.
func (s *sessions) get(id string, now time.Time) *session {
	return s.lookup(id, now, true)
}

// lookup returns the live session of id; use marks it used. What a page
// fetches by itself (its event streams, the agents list it refreshes) is
// not a use, so that an unattended page does not keep its session from
// idling out.
func (s *sessions) lookup(id string, now time.Time, use bool) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byID[id]
	if ss == nil {
		return nil
	}
	if s.expired(ss, now) {
		s.endLocked(id)
		return nil
	}
	if use {
		ss.mu.Lock()
		ss.lastUsed = now
		ss.mu.Unlock()
	}
	return ss
}

// alive reports whether ss is still held and not expired, without
// counting as a use (an open event stream does not keep a session alive).
func (s *sessions) alive(ss *session, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID[ss.id] != ss {
		return false
	}
	if s.expired(ss, now) {
		s.endLocked(ss.id)
		return false
	}
	return true
}

// deadline is when ss expires unless it is used again.
func (s *sessions) deadline(ss *session) time.Time {
	ss.mu.Lock()
	last := ss.lastUsed
	ss.mu.Unlock()
	idle := last.Add(s.idle)
	if abs := ss.created.Add(s.maxAge); abs.Before(idle) {
		return abs
	}
	return idle
}

func (s *sessions) expired(ss *session, now time.Time) bool {
	return !now.Before(s.deadline(ss))
}

// end ends the session of id, if any.
func (s *sessions) end(id string) {
	s.mu.Lock()
	s.endLocked(id)
	s.mu.Unlock()
}

func (s *sessions) endLocked(id string) {
	if ss := s.byID[id]; ss != nil {
		delete(s.byID, id)
		close(ss.ended)
	}
}

// endAll ends every session (shutdown).
func (s *sessions) endAll() {
	s.mu.Lock()
	for id := range s.byID {
		s.endLocked(id)
	}
	s.mu.Unlock()
}
