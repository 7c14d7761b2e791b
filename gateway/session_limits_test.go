package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// noAgents is an AgentRequester with no expert agent online.
type noAgents struct{}

func (noAgents) Request(context.Context, contract.Context, string, *contract.Caller, string, json.RawMessage, requester.InterimFunc) (*jsonrpc.Message, error) {
	return nil, errors.New("no expert agent is online")
}
func (noAgents) OnlineAgents(context.Context) []string { return nil }
func (noAgents) PresenceGeneration() uint64            { return 0 }

// limitsGateway is a gateway over a real store, with opts' session bounds,
// and a list-only token of alice's.
func limitsGateway(t *testing.T, opts Options) (*Gateway, string) {
	t.Helper()
	g, secrets := limitsGatewayTokens(t, opts, 1)
	return g, secrets[0]
}

// limitsGatewayTokens is limitsGateway with n list-only tokens of alice's.
func limitsGatewayTokens(t *testing.T, opts Options, n int) (*Gateway, []string) {
	t.Helper()
	st := openSharedStore(t)
	var secrets []string
	for range n {
		secret, _, err := st.CreateToken(t.Context(), store.TokenSpec{UserID: "alice", Scopes: []string{store.ScopeToolsList}})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
	}
	opts.Tokens, opts.Agents, opts.PlatformID = st, noAgents{}, "gwtest"
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, secrets
}

// mustCreate creates a session that its bounds admit.
func mustCreate(t *testing.T, ss *sessions, userID, holder, version string, caps json.RawMessage) (*session, string) {
	t.Helper()
	s, id, err := ss.create(userID, holder, version, caps)
	if err != nil {
		t.Fatalf("create a session of %s/%s: %v", userID, holder, err)
	}
	return s, id
}

// initialize posts an initialize with params and returns the session ID.
func initialize(t *testing.T, g *Gateway, secret, params string) string {
	t.Helper()
	w := postInitialize(t, g, secret, params)
	sid := w.Header().Get(headerSessionID)
	if w.Code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %.300s", w.Code, w.Body)
	}
	return sid
}

// postInitialize posts an initialize with params and returns the response.
func postInitialize(t *testing.T, g *Gateway, secret, params string) *httptest.ResponseRecorder {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + params + `}`
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, MCPPath, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, req)
	return w
}

// ping posts a ping on session sid and returns the HTTP status.
func ping(t *testing.T, g *Gateway, secret, sid string) int {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, MCPPath, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerSessionID, sid)
	w := httptest.NewRecorder()
	g.ServeHTTP(w, req)
	return w.Code
}

// TestSessionCaps: a session keeps a compacted copy of the client's
// capabilities, within maxSessionCaps, never the caller's bytes.
func TestSessionCaps(t *testing.T) {
	pad := strings.Repeat("a", maxSessionCaps)
	for _, tc := range []struct{ name, in, want string }{
		{"none", ``, ``},
		{"small, compacted", `{ "sampling" : {}, "roots": {"listChanged": true} }`, `{"sampling":{},"roots":{"listChanged":true}}`},
		{"large: the members acted on, as they came",
			`{"elicitation":{"form":{},"url":{}},"experimental":{"x":"` + pad + `"},"sampling":{"tools":{}}}`,
			`{"elicitation":{"form":{},"url":{}},"sampling":{"tools":{}}}`},
		{"large members: each as {}", `{"roots":{"x":"` + pad + `"},"tasks":{}}`, `{"roots":{},"tasks":{}}`},
		{"large, nothing acted on", `{"experimental":{"x":"` + pad + `"}}`, ``},
		{"not JSON", `{"sampling":`, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got := sessionCaps(in)
			if string(got) != tc.want {
				t.Fatalf("sessionCaps = %.200s; want %s", got, tc.want)
			}
			if cap(got) > maxSessionCaps+64 { // a size class of slack
				t.Errorf("kept capabilities hold %d bytes of backing array", cap(got))
			}
			for i := range in {
				in[i] = 'x'
			}
			if string(got) != tc.want {
				t.Errorf("kept capabilities changed with the caller's bytes: %.200s", got)
			}
		})
	}
}

// TestInitializeCopiesParams: what initialize keeps in a session does not
// point into the request body: overwriting the body afterwards changes
// neither the session's protocol version nor its capabilities. (The
// decoder hands out strings and raw members that do.)
func TestInitializeCopiesParams(t *testing.T) {
	g, secret := limitsGateway(t, Options{})
	tok, err := g.opts.Tokens.AuthenticateToken(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` +
		`"capabilities":{"sampling":{},"elicitation":{"form":{}}},"clientInfo":{"name":"c","version":"1"}}}`)
	var msg rpcRequest
	if err := decodeJSON(body, &msg); err != nil {
		t.Fatal(err)
	}
	req := &request{ctx: t.Context(), id: msg.ID, method: msg.Method, params: msg.Params, tok: tok}
	if err := decodeJSON(msg.Params, &req.p); err != nil {
		t.Fatal(err)
	}
	if a := g.handle(req); a.err != nil || req.sessionID == "" {
		t.Fatalf("initialize: %+v", a.err)
	}
	for i := range body {
		body[i] = 'x'
	}
	s, err := g.sessions.lookup(req.sessionID, tok.UserID, tok.Holder())
	if err != nil {
		t.Fatal(err)
	}
	if s.version != version20251125 {
		t.Errorf("session version %q after the body changed; want %q", s.version, version20251125)
	}
	if want := `{"sampling":{},"elicitation":{"form":{}}}`; string(s.caps) != want {
		t.Errorf("session capabilities %q after the body changed; want %s", s.caps, want)
	}
}

// TestInitializeFloodHeap: initializes with 1 MiB bodies from one token
// keep none of those bodies alive (the report: 200 of them grew the heap by
// about 1 GB). The bounds are off, so that every session stays live.
func TestInitializeFloodHeap(t *testing.T) {
	g, secret := limitsGateway(t, Options{MaxSessionsPerToken: -1, MaxSessionsPerUser: -1})
	const n, size = 48, 1 << 20
	params := `{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"c","version":"1","pad":"` +
		strings.Repeat("p", size) + `"}}`
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for range n {
		initialize(t, g, secret, params)
	}
	after := heap()
	if got := g.Stats().Sessions; got != n {
		t.Fatalf("%d live sessions, want %d", got, n)
	}
	// Without the copies each session pins its whole body: n MiB.
	if grown := int64(after) - int64(before); grown > 8<<20 {
		t.Errorf("heap grew by %d MiB over %d sessions: they keep their request bodies", grown>>20, n)
	}
}

// TestSessionLimits: past its bound, a token's next session ends its own
// least recently used one, which then answers 404 like a deleted one; the
// live count stays at the bound. Past the user's bound, a token ends only
// its own sessions, never those of the user's other tokens, and one with
// none to give up is refused; another user's sessions (even through the
// same OAuth client) are untouched; a session resumed from its signed ID
// (another replica's, or this process's before a restart) counts too; the
// "ended" marks of evictions stay bounded.
func TestSessionLimits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tick := func() time.Time { now = now.Add(time.Second); return now }
	newBounded := func(l sessionLimits) *sessions {
		ss := newSessions([]byte("secret"), time.Hour)
		ss.now = tick
		ss.bound(l, nil)
		return ss
	}
	live := func(ss *sessions, k groupKey) int {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if k.holder == "" {
			return ss.perUser[k.user]
		}
		if g := ss.groups[k]; g != nil {
			return g.lru.Len()
		}
		return 0
	}

	t.Run("per token, least recently used first", func(t *testing.T) {
		ss := newBounded(sessionLimits{perToken: 3, perUser: 100})
		var ids []string
		var first *session
		for i := range 3 {
			s, id := mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
			if i == 0 {
				first = s
			}
			ids = append(ids, id)
		}
		stream, ok := first.openStream()
		if !ok {
			t.Fatal("cannot open the first session's stream")
		}
		if _, err := ss.lookup(ids[0], "alice", "tb_1"); err != nil { // the first is now the most recent
			t.Fatal(err)
		}
		_, id := mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
		ids = append(ids, id)
		if _, err := ss.lookup(ids[1], "alice", "tb_1"); !errors.Is(err, errSessionEnded) {
			t.Errorf("the least recently used session: err = %v, want errSessionEnded", err)
		}
		if _, err := ss.lookup(ids[0], "alice", "tb_1"); err != nil {
			t.Errorf("the first session, used since: %v", err)
		}
		select {
		case <-stream:
			t.Error("a session that was not evicted lost its GET stream")
		default:
		}
		for range 20 {
			_, id := mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
			ids = append(ids, id)
		}
		if got := live(ss, groupKey{user: "alice", holder: "tb_1"}); got != 3 || ss.count() != 3 {
			t.Fatalf("%d live sessions of the token (%d in all), want 3", got, ss.count())
		}
		select {
		case <-stream:
		default:
			t.Error("the evicted first session's GET stream is still open")
		}
		if _, err := ss.lookup(ids[len(ids)-4], "alice", "tb_1"); !errors.Is(err, errSessionEnded) {
			t.Errorf("the session evicted last: err = %v, want errSessionEnded", err)
		}
		for _, id := range ids[len(ids)-2:] {
			if _, err := ss.lookup(id, "alice", "tb_1"); err != nil {
				t.Errorf("a recent session: %v", err)
			}
		}
		ss.mu.Lock()
		marks := len(ss.ended)
		ss.mu.Unlock()
		if marks > 3 {
			t.Errorf("%d ended marks after 21 evictions; want at most the bound, 3", marks)
		}
		// Evicted before the kept marks: its own token may resume it, and
		// it counts against the bound again.
		if _, err := ss.lookup(ids[2], "alice", "tb_1"); err != nil {
			t.Errorf("a session evicted before the kept marks: %v", err)
		}
		if ss.count() != 3 {
			t.Errorf("%d live sessions after a resumption, want 3", ss.count())
		}
	})

	t.Run("per user: a token ends only its own", func(t *testing.T) {
		ss := newBounded(sessionLimits{perToken: 100, perUser: 4})
		_, bobID := mustCreate(t, ss, "bob", "oauth_shared", version20251125, nil)
		var mainIDs []string
		for range 3 {
			_, id := mustCreate(t, ss, "alice", "tb_main", version20251125, nil)
			mainIDs = append(mainIDs, id)
		}
		// The issue: a narrow token's flood of initializes ended the
		// sessions of the user's main client.
		_, first := mustCreate(t, ss, "alice", "oauth_shared", version20251125, nil)
		for range 20 {
			mustCreate(t, ss, "alice", "oauth_shared", version20251125, nil)
		}
		for i, id := range mainIDs {
			if _, err := ss.lookup(id, "alice", "tb_main"); err != nil {
				t.Errorf("main token's session %d after the other token's flood: %v", i, err)
			}
		}
		if _, err := ss.lookup(first, "alice", "oauth_shared"); !errors.Is(err, errSessionEnded) {
			t.Errorf("the flooding token's own first session: err = %v, want errSessionEnded", err)
		}
		if got := live(ss, groupKey{user: "alice"}); got != 4 {
			t.Errorf("%d live sessions of alice, want 4", got)
		}
		if got := live(ss, groupKey{user: "alice", holder: "oauth_shared"}); got != 1 {
			t.Errorf("%d live sessions of the flooding token, want 1", got)
		}
		// A token with none to give up is refused, and ends nothing.
		if _, _, err := ss.create("alice", "tb_new", version20251125, nil); !errors.Is(err, errTooManySessions) {
			t.Errorf("a token without sessions at the user's bound: err = %v, want errTooManySessions", err)
		}
		for i, id := range mainIDs {
			if _, err := ss.lookup(id, "alice", "tb_main"); err != nil {
				t.Errorf("main token's session %d after a refusal: %v", i, err)
			}
		}
		ss.mu.Lock()
		_, kept := ss.groups[groupKey{user: "alice", holder: "tb_new"}]
		ss.mu.Unlock()
		if kept {
			t.Error("the refused token's group is kept")
		}
		if _, err := ss.lookup(bobID, "bob", "oauth_shared"); err != nil {
			t.Errorf("bob's session through the same OAuth client: %v", err)
		}
		if ss.count() != 5 {
			t.Errorf("%d live sessions, want alice's 4 and bob's 1", ss.count())
		}
	})

	t.Run("resumed at the user's bound: refused", func(t *testing.T) {
		a := newBounded(sessionLimits{})
		_, id := mustCreate(t, a, "alice", "tb_narrow", version20251125, nil)
		b := newBounded(sessionLimits{perToken: 10, perUser: 2})
		mustCreate(t, b, "alice", "tb_main", version20251125, nil)
		mustCreate(t, b, "alice", "tb_main", version20251125, nil)
		if _, err := b.lookup(id, "alice", "tb_narrow"); !errors.Is(err, errTooManySessions) {
			t.Errorf("err = %v, want errTooManySessions", err)
		}
		if b.count() != 2 {
			t.Errorf("%d live sessions, want 2", b.count())
		}
	})

	t.Run("resumed sessions count", func(t *testing.T) {
		a := newBounded(sessionLimits{})
		var ids []string
		for range 10 {
			_, id := mustCreate(t, a, "alice", "tb_1", version20251125, nil)
			ids = append(ids, id)
		}
		b := newBounded(sessionLimits{perToken: 2, perUser: 100})
		for _, id := range ids {
			if _, err := b.lookup(id, "alice", "tb_1"); err != nil {
				t.Fatal(err)
			}
		}
		if b.count() != 2 {
			t.Errorf("%d sessions resumed and live, want 2", b.count())
		}
	})

	t.Run("zero limits bound nothing", func(t *testing.T) {
		ss := newBounded(sessionLimits{})
		for range 50 {
			mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
		}
		if ss.count() != 50 || len(ss.groups) != 0 {
			t.Errorf("%d live, %d groups", ss.count(), len(ss.groups))
		}
	})

	t.Run("sweep drops groups and marks", func(t *testing.T) {
		ss := newBounded(sessionLimits{perToken: 2, perUser: 100})
		for range 5 {
			mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
		}
		now = now.Add(3 * time.Hour)
		ss.sweep()
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if len(ss.live) != 0 || len(ss.byID) != 0 || len(ss.ended) != 0 || len(ss.groups) != 0 {
			t.Errorf("after the sweep: %d live, %d IDs, %d ended, %d groups", len(ss.live), len(ss.byID), len(ss.ended), len(ss.groups))
		}
	})
}

// TestSessionLimitsOverHTTP: many initializes from one token keep the live
// sessions at the bound; an evicted session answers 404 as a deleted one
// does, the newest works. The defaults apply to a zero Options.
func TestSessionLimitsOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want int
	}{
		{"per token", Options{MaxSessionsPerToken: 5}, 5},
		{"per user", Options{MaxSessionsPerToken: 50, MaxSessionsPerUser: 7}, 7},
		{"defaults", Options{}, DefaultMaxSessionsPerToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, secret := limitsGateway(t, tc.opts)
			var ids []string
			for range tc.want + 20 {
				ids = append(ids, initialize(t, g, secret, `{"protocolVersion":"2025-11-25","capabilities":{}}`))
			}
			if got := g.Stats().Sessions; got != tc.want {
				t.Errorf("%d live sessions, want %d", got, tc.want)
			}
			// ids[:20] were evicted in order; the marks of the last
			// tc.want evictions are kept.
			if code := ping(t, g, secret, ids[19]); code != http.StatusNotFound {
				t.Errorf("the session evicted last: HTTP %d, want 404", code)
			}
			if code := ping(t, g, secret, ids[len(ids)-1]); code != http.StatusOK {
				t.Errorf("the newest session: HTTP %d, want 200", code)
			}
		})
	}
}

// TestSessionLimitsPerUserOverHTTP: at the user's bound, a token with
// sessions ends its own; one with none is refused with 429, Retry-After
// and a JSON-RPC error that says why; the user's other sessions all work.
func TestSessionLimitsPerUserOverHTTP(t *testing.T) {
	g, secrets := limitsGatewayTokens(t, Options{MaxSessionsPerToken: 50, MaxSessionsPerUser: 3}, 3)
	main, narrow, idle := secrets[0], secrets[1], secrets[2]
	params := `{"protocolVersion":"2025-11-25","capabilities":{}}`
	mainIDs := []string{initialize(t, g, main, params), initialize(t, g, main, params)}
	narrowFirst := initialize(t, g, narrow, params)
	for range 10 {
		initialize(t, g, narrow, params)
	}
	if code := ping(t, g, narrow, narrowFirst); code != http.StatusNotFound {
		t.Errorf("the narrow token's own first session: HTTP %d, want 404", code)
	}
	w := postInitialize(t, g, idle, params)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != fmt.Sprint(sessionsFullRetry) ||
		w.Header().Get(headerSessionID) != "" {
		t.Fatalf("a token without sessions at the user's bound: HTTP %d, Retry-After %q, session %q",
			w.Code, w.Header().Get("Retry-After"), w.Header().Get(headerSessionID))
	}
	var body struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				RetryAfter int `json:"retryAfter"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || string(body.ID) != "1" || body.Error.Code != codeRateLimited ||
		body.Error.Data.RetryAfter != sessionsFullRetry || !strings.Contains(body.Error.Message, "too many sessions") {
		t.Errorf("body %s (%v)", w.Body, err)
	}
	for i, id := range mainIDs {
		if code := ping(t, g, main, id); code != http.StatusOK {
			t.Errorf("main token's session %d: HTTP %d, want 200", i, code)
		}
	}
	if got := g.Stats().Sessions; got != 3 {
		t.Errorf("%d live sessions, want 3", got)
	}
}

// The kept capabilities stay valid JSON for withMeta and clientCan.
func TestSessionCapsUsable(t *testing.T) {
	caps := sessionCaps(json.RawMessage(`{"sampling":{},"experimental":{"x":"` + strings.Repeat("a", 2*maxSessionCaps) + `"}}`))
	if !json.Valid(caps) || !clientCan(caps, "sampling/createMessage") || clientCan(caps, "roots/list") {
		t.Fatalf("kept capabilities %s", caps)
	}
	if p := withMeta(json.RawMessage(`{}`), metaClientCapabilities, caps); !bytes.Contains(p, caps) {
		t.Fatalf("withMeta = %s", p)
	}
}
