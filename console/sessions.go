package console

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/store"
)

// The Sessions page: the console's own sign-in sessions, held in this
// process (session.go). A session is shown by its handle, never its ID:
// the ID is the cookie's value, a bearer secret.

// handleLen is the length of a session's handle in hex digits.
const handleLen = 8

// handle is the session's name on the page and in URLs: the first
// handleLen hex digits of the SHA-256 of its ID, which tell nothing of
// the ID.
func (ss *session) handle() string {
	sum := sha256.Sum256([]byte(ss.id))
	return hex.EncodeToString(sum[:])[:handleLen]
}

// list returns the live sessions, oldest sign-in first; expired ones are
// ended on the way.
func (s *sessions) list(now time.Time) []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*session, 0, len(s.byID))
	for id, ss := range s.byID {
		if s.expired(ss, now) {
			s.endLocked(id)
			continue
		}
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b *session) int { return a.created.Compare(b.created) })
	return out
}

// endHandle ends the live session whose handle is h and returns it; nil
// if none is (or, against all odds, more than one).
func (s *sessions) endHandle(h string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *session
	for _, ss := range s.byID {
		if ss.handle() == h {
			if found != nil {
				return nil
			}
			found = ss
		}
	}
	if found != nil {
		s.endLocked(found.id)
	}
	return found
}

// sessionsData is the Sessions page's data.
type sessionsData struct {
	Sessions []sessionRow
	// Idle and MaxAge are the expiry rules, as text ("30 min", "12 h").
	Idle, MaxAge string
}

type sessionRow struct {
	Handle, User                             string
	SignedIn, LastUsed, IdleEnd, AbsoluteEnd time.Time
	// Current: the session of the operator looking at the page.
	Current bool
}

func (c *Console) renderSessions(w http.ResponseWriter, ss *session, status int, done, msg string) {
	now := time.Now()
	d := sessionsData{Idle: durationText(c.sessions.idle), MaxAge: durationText(c.sessions.maxAge)}
	for _, o := range c.sessions.list(now) {
		o.mu.Lock()
		last := o.lastUsed
		o.mu.Unlock()
		d.Sessions = append(d.Sessions, sessionRow{Handle: o.handle(), User: o.user, SignedIn: o.created, LastUsed: last,
			IdleEnd: last.Add(c.sessions.idle), AbsoluteEnd: o.created.Add(c.sessions.maxAge), Current: o == ss})
	}
	c.render(w, status, "sessions", pageData{Title: "Console sessions", Nav: "sessions", User: ss.user, Page: d, Done: done, Message: msg})
}

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderSessions(w, ss, http.StatusOK, "", "")
}

// sessionEnd ends a session: it is signed out at its next request and
// its event streams end now. Ending one's own signs out.
func (c *Console) sessionEnd(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	h := r.PathValue("handle")
	ended := c.sessions.endHandle(h)
	if ended == nil {
		c.renderSessions(w, ss, http.StatusNotFound, "", "No such session: it ended or expired.")
		return
	}
	c.audit(r, store.AuditEvent{Action: "session_end", UserID: ended.user, Target: "session " + h, Reason: "ended by " + ss.user + " on the sessions page"})
	if ended == ss {
		c.setCookie(w, "", -1)
		http.Redirect(w, r, Path+"sign-in", http.StatusSeeOther)
		return
	}
	c.renderSessions(w, ss, http.StatusOK, "Ended session "+h+" of "+ended.user+": it is signed out.", "")
}

// durationText is d in whole hours or minutes when it is one ("12 h",
// "30 min"), else as Go writes it.
func durationText(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return d.String()
}
