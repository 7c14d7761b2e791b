package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/jsonrpc"
)

// Errors of session lookup. Each answers 404 on the wire: a client must not
// learn whether an ID was forged, expired, ended or someone else's.
var (
	errSessionUnknown = errors.New("session unknown or expired")
	errSessionEnded   = errors.New("session ended")
)

// session is one legacy-era MCP session (initialize ... DELETE).
type session struct {
	// key is the random part of the ID; it is also the sessionId level of
	// the session's MQTT topics.
	key     string
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
	logLevel    int             // index into logLevels; -1: not set
	caps        json.RawMessage // the client's capabilities from initialize
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
}

func newSessions(secret []byte, ttl time.Duration) *sessions {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	return &sessions{secret: secret, ttl: ttl, now: time.Now,
		live: map[string]*session{}, byID: map[string]*session{}, ended: map[string]time.Time{}}
}

// create starts a session for a token holder (acl.Token.Holder) and
// returns it with its ID.
func (ss *sessions) create(userID, holder, version string, caps json.RawMessage) (*session, string) {
	kb := make([]byte, 16)
	_, _ = rand.Read(kb)
	now := ss.now()
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
	ss.mu.Lock()
	ss.live[s.key] = s
	ss.byID[id] = s
	ss.mu.Unlock()
	return s, id
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
	ss.mu.Unlock()
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
			s = &session{key: c.Key, userID: c.UserID, holder: c.Holder, version: c.Version,
				created: time.Unix(c.Created, 0), lastUsed: now, logLevel: -1, caps: c.Caps}
			ss.live[c.Key] = s
		}
		ss.byID[id] = s
		ss.mu.Unlock()
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
	delete(ss.live, s.key)
	for id, x := range ss.byID {
		if x == s {
			delete(ss.byID, id)
		}
	}
}

func (ss *sessions) verify(id string) (sessionClaims, bool) {
	var c sessionClaims
	p, sig, ok := strings.Cut(id, ".")
	if !ok || len(id) > maxSessionIDLen {
		return c, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, ss.mac(p)) {
		return c, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil || json.Unmarshal(payload, &c) != nil || c.Key == "" {
		return c, false
	}
	return c, true
}

// end terminates a session; later lookups of it fail.
func (ss *sessions) end(s *session) {
	s.mu.Lock()
	if !s.ended && s.endedCh != nil {
		close(s.endedCh)
	}
	s.ended = true
	s.mu.Unlock()
	ss.mu.Lock()
	ss.ended[s.key] = s.created.Add(ss.ttl)
	ss.mu.Unlock()
	ss.forget(s)
}

// sweep forgets sessions idle longer than the TTL and ended sessions whose
// IDs can no longer be presented, so the maps stay bounded by activity.
func (ss *sessions) sweep() {
	now := ss.now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, s := range ss.byID {
		s.mu.Lock()
		idle := now.Sub(s.lastUsed)
		s.mu.Unlock()
		if idle > ss.ttl {
			delete(ss.byID, id)
			delete(ss.live, s.key)
		}
	}
	for k, s := range ss.live {
		s.mu.Lock()
		idle := now.Sub(s.lastUsed)
		s.mu.Unlock()
		if idle > ss.ttl {
			delete(ss.live, k)
		}
	}
	for k, until := range ss.ended {
		if now.After(until) {
			delete(ss.ended, k)
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
