package gateway

import (
	"bytes"
	"container/list"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/jsonrpc"
)

// Errors of session lookup. Each answers 404 on the wire: a client must not
// learn whether an ID was forged, expired, ended or someone else's.
var (
	errSessionUnknown = errors.New("session unknown or expired")
	errSessionEnded   = errors.New("session ended")
	// errTooManySessions: the user has MaxSessionsPerUser live sessions
	// here and the token presenting a new one has none of them to give
	// up. Answered 429 with Retry-After (sessionsFullRetry).
	errTooManySessions = errors.New("too many sessions")
)

// sessionsFullRetry is the Retry-After, in seconds, of errTooManySessions:
// one sweep of idle sessions (Gateway.sweepSessions), the soonest a
// session can end that no client DELETEs.
const sessionsFullRetry = 60

// Defaults of Options.MaxSessionsPerToken and MaxSessionsPerUser.
const (
	DefaultMaxSessionsPerToken = 128
	DefaultMaxSessionsPerUser  = 512
)

// maxSessionCaps bounds the client capabilities a session keeps (and hands
// the agents with each of its requests); sessionCaps says what is kept of
// larger ones.
const maxSessionCaps = 4 << 10

// sessionCapMembers are the members of the client's capabilities the
// gateway acts on (clientCan) or agents ask about; all a session keeps of
// capabilities over maxSessionCaps.
var sessionCapMembers = []string{"roots", "sampling", "elicitation", "tasks"}

// sessionCaps is what a session keeps of the client's capabilities: a
// compacted copy, never a slice of the request body (which it would pin
// for the session's life). Over maxSessionCaps, only sessionCapMembers are
// kept, as they came if they fit, else each as {} (their sub-flags
// dropped). nil when nothing is left. Trimmed rather than refused: a
// client's experimental capabilities are no reason to turn it away, and
// the gateway acts on none of them.
func sessionCaps(caps json.RawMessage) json.RawMessage {
	if len(caps) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, caps) != nil {
		return nil
	}
	if b.Len() <= maxSessionCaps {
		// Compact grows b to the input's size, which may be the body's.
		return bytes.Clone(b.Bytes())
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b.Bytes(), &m) != nil { // encoding/json copies raw members
		return nil
	}
	kept := map[string]json.RawMessage{}
	for _, k := range sessionCapMembers {
		if v, ok := m[k]; ok {
			kept[k] = v
		}
	}
	if len(kept) == 0 {
		return nil
	}
	out, _ := json.Marshal(kept) // raw members of valid JSON: cannot fail
	if len(out) > maxSessionCaps {
		for k := range kept {
			kept[k] = json.RawMessage(`{}`)
		}
		out, _ = json.Marshal(kept)
	}
	return out
}

// internVersion returns v as one of the gateway's own constants when it
// is one: the decoder hands out strings that point into the request body.
func internVersion(v string) string {
	for _, c := range supportedVersions {
		if v == c {
			return c
		}
	}
	return strings.Clone(v)
}

// sessionLimits bound the live sessions of one token holder of one user,
// and of one user, on this replica. Zero or negative: no bound.
type sessionLimits struct {
	perToken, perUser int
}

// sessionBounds are the options' session bounds, defaults applied.
func (o *Options) sessionBounds() sessionLimits {
	l := sessionLimits{perToken: o.MaxSessionsPerToken, perUser: o.MaxSessionsPerUser}
	if l.perToken == 0 {
		l.perToken = DefaultMaxSessionsPerToken
	}
	if l.perUser == 0 {
		l.perUser = DefaultMaxSessionsPerUser
	}
	return l
}

// groupKey names a sessionGroup: one token holder's sessions of one
// user. The user is part of the key: an OAuth client's holder is shared
// by every user who signed in with it.
type groupKey struct {
	user, holder string
}

// sessionGroup is the live sessions of one token holder of one user on
// this replica, least recently used first, and the keys of those it
// evicted whose "ended" marks are still kept, oldest first: at most
// markBound of them, so that a flood of initializes grows no map without
// end. An evicted session whose mark was dropped can be presented again
// by its own token only, and then counts against the bounds again.
type sessionGroup struct {
	lru     list.List // of *session
	evicted []string
}

// session is one legacy-era MCP session (initialize ... DELETE).
type session struct {
	// key is the random part of the ID; it is also the sessionId level of
	// the session's MQTT topics.
	key string
	// id is the session's ID, its key in sessions.byID ("" until known).
	id      string
	userID  string
	holder  string
	version string
	created time.Time

	mu       sync.Mutex
	lastUsed time.Time
	ended    bool
	// sharedUntil: until then, the shared store's "not ended" answer
	// holds (session_shared.go).
	sharedUntil time.Time
	// group and elem place the session in its holder's LRU while the
	// sessions are bounded (nil otherwise, and once it left); guarded by
	// sessions.mu, not mu.
	group    *sessionGroup
	elem     *list.Element
	logLevel int             // index into logLevels; -1: not set
	caps     json.RawMessage // the client's capabilities from initialize
	// waiting: server-to-client requests awaiting the client's answer, by id.
	waiting map[string]chan clientResponse
	// inflight: how to cancel the client's running requests, by raw id.
	inflight map[string]func()
	// streamOpen: the session's GET stream is open (listen.go); endedCh
	// is closed when the session ends, which ends that stream.
	streamOpen bool
	endedCh    chan struct{}
}

// openStream marks the session's GET stream open and returns a channel
// closed when the session ends; false if a stream is open already or the
// session has ended.
func (s *session) openStream() (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streamOpen || s.ended {
		return nil, false
	}
	s.streamOpen = true
	if s.endedCh == nil {
		s.endedCh = make(chan struct{})
	}
	return s.endedCh, true
}

func (s *session) closeStream() {
	s.mu.Lock()
	s.streamOpen = false
	s.mu.Unlock()
}

// sessionClaims is what a session ID carries, signed, so that a replica that
// shares the secret can serve a session another replica created.
type sessionClaims struct {
	Key     string `json:"k"`
	UserID  string `json:"u"`
	Holder  string `json:"t"`
	Version string `json:"v"`
	Created int64  `json:"c"`
	// Caps are the client's capabilities from initialize (claimCaps), so
	// that another replica can relay sampling and elicitation requests
	// and tell the agents what the client can do.
	Caps json.RawMessage `json:"p,omitempty"`
}

// sessions issues and checks session IDs of the form
// <base64url claims>.<base64url HMAC-SHA256>, and keeps per-session state.
type sessions struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time

	mu    sync.Mutex
	live  map[string]*session  // by key
	byID  map[string]*session  // by full session ID: spares the HMAC on every request
	ended map[string]time.Time // key -> when it stops mattering (created + ttl bound)

	shared *sharedEnded // nil: ended sessions are known to this process only

	// limits bound the live sessions per token holder and per user (set
	// once by bound, before the first session; zero: no bounds); groups
	// holds the sessions by holder, and perUser counts them by user, while
	// there are limits.
	limits  sessionLimits
	groups  map[groupKey]*sessionGroup
	perUser map[string]int
	log     *logrus.Entry // eviction notices
}

func newSessions(secret []byte, ttl time.Duration) *sessions {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	return &sessions{secret: secret, ttl: ttl, now: time.Now,
		live: map[string]*session{}, byID: map[string]*session{}, ended: map[string]time.Time{},
		groups: map[groupKey]*sessionGroup{}, perUser: map[string]int{}, log: logutil.OrDiscard(nil)}
}

// bound sets the limits and the logger of eviction notices (gateway.New,
// before the sessions are used).
func (ss *sessions) bound(l sessionLimits, log *logrus.Entry) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.limits, ss.log = l, logutil.OrDiscard(log)
}

// create starts a session for a token holder (store.Token.Holder) and
// returns it with its ID. It keeps copies of version and caps (sessionCaps),
// never the caller's bytes. Past the holder's or the user's bound, it ends
// the least recently used of the holder's other sessions, or fails with
// errTooManySessions when the holder has none to give up (admit).
func (ss *sessions) create(userID, holder, version string, caps json.RawMessage) (*session, string, error) {
	kb := make([]byte, 16)
	_, _ = rand.Read(kb)
	now := ss.now()
	caps = sessionCaps(caps)
	version = internVersion(version)
	s := &session{key: hex.EncodeToString(kb), userID: userID, holder: holder, version: version,
		created: now, lastUsed: now, logLevel: -1, caps: caps}
	if sh := ss.shared; sh != nil && sh.ttl > 0 {
		// Nobody can have ended a session whose ID no client has seen yet:
		// "not ended" is as fresh now as a store read, and the session's
		// first requests need not ask (see checkShared).
		s.sharedUntil = now.Add(sh.ttl)
	}
	id := ss.sign(sessionClaims{Key: s.key, UserID: userID, Holder: holder, Version: version, Created: now.Unix(),
		Caps: claimCaps(caps)})
	s.id = id
	ss.mu.Lock()
	evicted, err := ss.admit(s)
	if err == nil {
		ss.live[s.key] = s
		ss.byID[id] = s
	}
	ss.mu.Unlock()
	ss.noteEvicted(evicted)
	if err != nil {
		return nil, "", err
	}
	return s, id, nil
}

// eviction is a session admit ended, and whether the user's bound (else
// the token's) made it end.
type eviction struct {
	s       *session
	perUser bool
}

// admit counts s, about to be made live, in its holder's and its user's
// sessions. Past either bound it first ends the holder's least recently
// used sessions, as a DELETE would (GET stream closed, the ID refused here
// with 404, so its client initializes anew), and returns those it ended.
// Only the holder's own: one token of a user (a narrow integration's, or
// a leaked one) must not end the sessions of the user's other clients.
// When the user's bound needs more of them than the holder has, nothing is
// ended and s is refused (errTooManySessions). Called with ss.mu held.
// Evicting rather than refusing a holder's own: a client that never
// DELETEs its sessions would otherwise lock its token out for the TTL.
// The bounds are per replica, and an eviction is not recorded in the
// shared store (EndedSessions): a flood of initializes must not become a
// flood of store writes. Another replica may still serve an evicted
// session's ID; there it counts against that replica's bounds.
func (ss *sessions) admit(s *session) ([]eviction, error) {
	l := ss.limits
	if l.perToken <= 0 && l.perUser <= 0 {
		return nil, nil
	}
	k := groupKey{user: s.userID, holder: s.holder}
	g := ss.groups[k]
	if g == nil {
		g = &sessionGroup{}
		ss.groups[k] = g
	}
	// need is how many of the holder's sessions must end for s to fit.
	needTok, needUser := 0, 0
	if l.perToken > 0 {
		needTok = g.lru.Len() + 1 - l.perToken
	}
	if l.perUser > 0 {
		needUser = ss.perUser[s.userID] + 1 - l.perUser
	}
	if needUser > g.lru.Len() {
		if g.lru.Len() == 0 && len(g.evicted) == 0 {
			delete(ss.groups, k)
		}
		return nil, errTooManySessions
	}
	var out []eviction
	for range max(needTok, needUser) {
		v := g.lru.Front().Value.(*session)
		ss.endLocked(v)
		g.evicted = append(g.evicted, v.key)
		if len(g.evicted) > l.markBound() {
			delete(ss.ended, g.evicted[0])
			g.evicted = append(g.evicted[:0], g.evicted[1:]...)
		}
		out = append(out, eviction{s: v, perUser: needUser > needTok})
	}
	ss.groups[k] = g // ending its last session may have dropped it
	s.group, s.elem = g, g.lru.PushBack(s)
	ss.perUser[s.userID]++
	return out, nil
}

// markBound bounds the "ended" marks a holder's group keeps of the
// sessions it evicted: its own bound, else the user's.
func (l sessionLimits) markBound() int {
	if l.perToken > 0 {
		return l.perToken
	}
	return l.perUser
}

// noteEvicted logs the sessions admit ended (outside ss.mu).
func (ss *sessions) noteEvicted(evicted []eviction) {
	for _, e := range evicted {
		which := "token's"
		if e.perUser {
			which = "user's"
		}
		// Debug: under a flood of initializes, a line each would be a
		// flood of logs.
		ss.log.WithFields(logrus.Fields{"user": e.s.userID, "session": e.s.key}).
			Debug("the " + which + " session limit reached: ended the token's least recently used session")
	}
}

// leaveGroups removes s from its holder's group and its user's count, and
// drops a group left with nothing to hold. Called with ss.mu held.
func (ss *sessions) leaveGroups(s *session) {
	g := s.group
	if g == nil {
		return
	}
	g.lru.Remove(s.elem)
	s.group, s.elem = nil, nil
	if n := ss.perUser[s.userID] - 1; n > 0 {
		ss.perUser[s.userID] = n
	} else {
		delete(ss.perUser, s.userID)
	}
	if g.lru.Len() == 0 && len(g.evicted) == 0 {
		delete(ss.groups, groupKey{user: s.userID, holder: s.holder})
	}
}

func (ss *sessions) sign(c sessionClaims) string {
	payload, _ := json.Marshal(c) // plain strings and ints: cannot fail
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(ss.mac(p))
}

func (ss *sessions) mac(p string) []byte {
	m := hmac.New(sha256.New, ss.secret)
	m.Write([]byte(p))
	return m.Sum(nil)
}

// lookup returns the session an ID names, for the holder of the token
// presenting it.
func (ss *sessions) lookup(id, userID, holder string) (*session, error) {
	now := ss.now()
	ss.mu.Lock()
	s, known := ss.byID[id]
	if known && s.elem != nil && s.userID == userID && s.holder == holder {
		// Used now: the last its holder would give up. A session idle
		// past the TTL is forgotten below anyway.
		s.group.lru.MoveToBack(s.elem)
	}
	ss.mu.Unlock()
	var evicted []eviction
	if !known {
		c, ok := ss.verify(id)
		if !ok || c.UserID != userID || c.Holder != holder {
			// Ownership first: a stranger must not learn whether another
			// token's session was ended, live or forged.
			return nil, errSessionUnknown
		}
		ss.mu.Lock()
		if _, gone := ss.ended[c.Key]; gone {
			ss.mu.Unlock()
			return nil, errSessionEnded
		}
		if s = ss.live[c.Key]; s == nil {
			// Signed by a replica that shares the secret (or by this
			// process before a restart): the claims carry what it needs.
			if now.Sub(time.Unix(c.Created, 0)) > ss.ttl {
				ss.mu.Unlock()
				return nil, errSessionUnknown
			}
			// It counts against the bounds as a new one would.
			s = &session{key: c.Key, id: strings.Clone(id), userID: c.UserID, holder: c.Holder,
				version: internVersion(c.Version), created: time.Unix(c.Created, 0), lastUsed: now,
				logLevel: -1, caps: sessionCaps(c.Caps)}
			var err error
			if evicted, err = ss.admit(s); err != nil {
				ss.mu.Unlock()
				return nil, err
			}
			ss.live[c.Key] = s
			ss.byID[s.id] = s
		} else if s.id == "" {
			s.id = strings.Clone(id)
			ss.byID[s.id] = s
		}
		ss.mu.Unlock()
		ss.noteEvicted(evicted)
	}
	if s.userID != userID || s.holder != holder {
		return nil, errSessionUnknown
	}
	// Lock order: ss.mu before s.mu (sweep); so s.mu is released before forget.
	s.mu.Lock()
	idle, ended := now.Sub(s.lastUsed), s.ended
	if idle <= ss.ttl && !ended {
		s.lastUsed = now
	}
	s.mu.Unlock()
	switch {
	case ended:
		return nil, errSessionEnded
	case idle > ss.ttl:
		ss.forget(s)
		return nil, errSessionUnknown
	}
	return s, nil
}

// forget drops a session's entries (not its "ended" mark).
func (ss *sessions) forget(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.forgetLocked(s)
}

func (ss *sessions) forgetLocked(s *session) {
	if ss.live[s.key] == s {
		delete(ss.live, s.key)
	}
	// One ID per session: verify takes base64 strictly, so no other
	// spelling of an ID names the same session.
	if s.id != "" && ss.byID[s.id] == s {
		delete(ss.byID, s.id)
	}
	ss.leaveGroups(s)
}

func (ss *sessions) verify(id string) (sessionClaims, bool) {
	var c sessionClaims
	p, sig, ok := strings.Cut(id, ".")
	if !ok || len(id) > maxSessionIDLen {
		return c, false
	}
	got, err := strictB64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, ss.mac(p)) {
		return c, false
	}
	payload, err := strictB64.DecodeString(p)
	if err != nil || json.Unmarshal(payload, &c) != nil || c.Key == "" {
		return c, false
	}
	return c, true
}

// strictB64 decodes session IDs: strict, so that an ID has one spelling.
var strictB64 = base64.RawURLEncoding.Strict()

// end terminates a session; later lookups of it fail.
func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.endLocked(s)
}

// endLocked is end with ss.mu held (the lock order is ss.mu, then s.mu).
func (ss *sessions) endLocked(s *session) {
	s.mu.Lock()
	if !s.ended && s.endedCh != nil {
		close(s.endedCh)
	}
	s.ended = true
	s.mu.Unlock()
	ss.ended[s.key] = s.created.Add(ss.ttl)
	ss.forgetLocked(s)
}

// sweep forgets sessions idle longer than the TTL and ended sessions whose
// IDs can no longer be presented, so the maps stay bounded by activity.
func (ss *sessions) sweep() {
	now := ss.now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.live {
		s.mu.Lock()
		idle := now.Sub(s.lastUsed)
		s.mu.Unlock()
		if idle > ss.ttl {
			ss.forgetLocked(s)
		}
	}
	for k, until := range ss.ended {
		if now.After(until) {
			delete(ss.ended, k)
		}
	}
	for k, g := range ss.groups {
		g.evicted = slices.DeleteFunc(g.evicted, func(key string) bool {
			_, marked := ss.ended[key]
			return !marked
		})
		if g.lru.Len() == 0 && len(g.evicted) == 0 {
			delete(ss.groups, k)
		}
	}
}

// count is the number of live sessions held.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.live)
}

// logLevels in increasing severity, as MCP's logging/setLevel names them.
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

func logLevelIndex(s string) int {
	for i, l := range logLevels {
		if l == s {
			return i
		}
	}
	return -1
}

// clientResponse is a client's answer to a server-to-client request.
type clientResponse struct {
	Result json.RawMessage
	Error  *jsonrpc.Error
}

// expectResponse registers a server-to-client request id and returns the
// channel its answer arrives on. Called again with the same id, it drops the
// registration (the asker gave up).
func (s *session) expectResponse(id string) <-chan clientResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[string]chan clientResponse{}
	}
	if ch, ok := s.waiting[id]; ok {
		delete(s.waiting, id)
		return ch
	}
	ch := make(chan clientResponse, 1)
	s.waiting[id] = ch
	return ch
}

// deliver hands a client's response to the request waiting for it. It
// reports whether one was.
func (s *session) deliver(id string, r clientResponse) bool {
	s.mu.Lock()
	ch, ok := s.waiting[id]
	delete(s.waiting, id)
	s.mu.Unlock()
	if ok {
		ch <- r
	}
	return ok
}

// setInflight records (or, with nil, forgets) how to cancel the client
// request with this raw id.
func (s *session) setInflight(id string, cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel == nil {
		delete(s.inflight, id)
		return
	}
	if s.inflight == nil {
		s.inflight = map[string]func(){}
	}
	s.inflight[id] = cancel
}

// cancel ends the client request with this raw id, if it is running.
func (s *session) cancel(id string) {
	s.mu.Lock()
	f := s.inflight[id]
	s.mu.Unlock()
	if f != nil {
		f()
	}
}
