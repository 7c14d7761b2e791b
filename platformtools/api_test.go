package platformtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

var (
	t0 = time.Date(2025, 11, 25, 10, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
	t2 = t0.Add(2 * time.Minute)
)

// testAPIOptions are the data sources the gateway would give the API.
func testAPIOptions() platformtools.APIOptions {
	return platformtools.APIOptions{
		Agents: platformtools.AgentsFromStatus(func() []requester.AgentStatus {
			return []requester.AgentStatus{
				{Agent: "echoer", ClientID: "echo-b", Name: "echo", Version: "1.0", Online: false, Since: t1},
				{Agent: "echoer", ClientID: "echo-a", Name: "echo", Version: "1.0", Online: true, Since: t0},
			}
		}),
		AgentTools: func(_ context.Context, tok store.Token) ([]platformtools.AgentTool, error) {
			return []platformtools.AgentTool{{Name: "word_count", Agent: "counter"}, {Name: "echo", Agent: "echoer", Title: "Echo", Description: "Says it back."}}, nil
		},
		Contexts: func(user string) []platformtools.ContextInfo {
			switch user {
			case "alice":
				return []platformtools.ContextInfo{
					{PlatformID: "p1", SessionID: "s1", EntityType: "_", EntityID: "_", LastUsed: t0},
					{PlatformID: "p1", SessionID: "s2", EntityType: "project", EntityID: "p1", LastUsed: t2},
					{PlatformID: "p1", SessionID: "s3", EntityType: "project", EntityID: "p2", LastUsed: t1},
				}
			case "bob":
				return []platformtools.ContextInfo{{PlatformID: "p1", SessionID: "bob-s", EntityType: "_", EntityID: "_", LastUsed: t0}}
			}
			return nil
		},
	}
}

// apiServer serves the API behind the bearer middleware on a real socket.
func apiServer(t *testing.T, s *store.Store, opts platformtools.APIOptions) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(platformRouter(s, platformtools.NewAPI(opts)))
	t.Cleanup(srv.Close)
	return srv
}

func TestAPIOverHTTP(t *testing.T) {
	s := openStore(t)
	srv := apiServer(t, s, testAPIOptions())
	full, fullTok := createToken(t, s, store.TokenSpec{UserID: "alice", Name: "laptop"})
	narrow, narrowTok := createToken(t, s, store.TokenSpec{UserID: "alice", ReadOnly: true, TTL: time.Hour,
		Entities: []store.Entity{{Type: "project", ID: "p1"}}, Scopes: []string{store.ScopeToolsList}})
	adminOnly, adminTok := createToken(t, s, store.TokenSpec{UserID: "carol", Scopes: []string{store.ScopeAdmin}})
	bob, _ := createToken(t, s, store.TokenSpec{UserID: "bob"})
	revoked, revokedTok := createToken(t, s, store.TokenSpec{UserID: "alice"})
	if err := s.RevokeToken(testCtx(t), revokedTok.ID); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, path, secret string
		wantStatus         int
		want               string // exact JSON value; "" skips
		wantCode           string // error code for non-2xx
	}{
		{"whoami", platformtools.PathWhoami, full, 200,
			`{"user":"alice","tokenId":"` + fullTok.ID + `","scopes":["tools:list","tools:call"],"readOnly":false,"entities":[],"expiresAt":null}`, ""},
		{"whoami narrowed", platformtools.PathWhoami, narrow, 200,
			`{"user":"alice","tokenId":"` + narrowTok.ID + `","scopes":["tools:list"],"readOnly":true,"entities":[{"type":"project","id":"p1"}],"expiresAt":"` +
				narrowTok.ExpiresAt.UTC().Format(time.RFC3339Nano) + `"}`, ""},
		{"whoami needs no scope", platformtools.PathWhoami, adminOnly, 200,
			`{"user":"carol","tokenId":"` + adminTok.ID + `","scopes":["admin"],"readOnly":false,"entities":[],"expiresAt":null}`, ""},
		{"agents", platformtools.PathAgents, full, 200,
			`{"agents":[{"agent":"echoer","clientId":"echo-a","name":"echo","version":"1.0","online":true,"since":"2025-11-25T10:00:00Z"},` +
				`{"agent":"echoer","clientId":"echo-b","name":"echo","version":"1.0","online":false,"since":"2025-11-25T10:01:00Z"}],` +
				`"tools":[{"name":"echo","agent":"echoer","title":"Echo","description":"Says it back."},{"name":"word_count","agent":"counter"}]}`, ""},
		{"agents needs tools:list", platformtools.PathAgents, adminOnly, 403, "", "forbidden"},
		{"contexts are the caller's, newest first", platformtools.PathContexts, full, 200,
			`{"contexts":[` +
				`{"platformId":"p1","sessionId":"s2","entityType":"project","entityId":"p1","lastUsed":"2025-11-25T10:02:00Z"},` +
				`{"platformId":"p1","sessionId":"s3","entityType":"project","entityId":"p2","lastUsed":"2025-11-25T10:01:00Z"},` +
				`{"platformId":"p1","sessionId":"s1","entityType":"_","entityId":"_","lastUsed":"2025-11-25T10:00:00Z"}]}`, ""},
		{"contexts of a narrowed token", platformtools.PathContexts, narrow, 200,
			`{"contexts":[{"platformId":"p1","sessionId":"s2","entityType":"project","entityId":"p1","lastUsed":"2025-11-25T10:02:00Z"}]}`, ""},
		{"contexts of another user", platformtools.PathContexts, bob, 200,
			`{"contexts":[{"platformId":"p1","sessionId":"bob-s","entityType":"_","entityId":"_","lastUsed":"2025-11-25T10:00:00Z"}]}`, ""},
		{"contexts of a user with none", platformtools.PathContexts, adminOnly, 200, `{"contexts":[]}`, ""},
		{"no token", platformtools.PathWhoami, "", 401, "", "unauthenticated"},
		{"bad token", platformtools.PathWhoami, "tb_xxxxxxxx_nope", 401, "", "unauthenticated"},
		{"revoked token", platformtools.PathAgents, revoked, 401, "", "unauthenticated"},
		{"unknown endpoint", "/api/v1/nope", full, 404, "", "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h, body := get(t, srv, tc.path, tc.secret)
			if status != tc.wantStatus {
				t.Fatalf("GET %s: status %d, want %d; body %s", tc.path, status, tc.wantStatus, body)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tc.want != "" && !jsonEqual(t, body, []byte(tc.want)) {
				t.Errorf("GET %s =\n%s\nwant\n%s", tc.path, body, tc.want)
			}
			if tc.wantCode != "" {
				var e platformtools.APIError
				if err := json.Unmarshal(body, &e); err != nil || e.Code != tc.wantCode || e.Message == "" {
					t.Errorf("error body %s: want {\"error\":%q,\"message\":...}", body, tc.wantCode)
				}
			}
			if status == 401 && h.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			if status == 200 && h.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", h.Get("Cache-Control"))
			}
		})
	}
}

// TestAPIWithoutMiddleware checks the API's own refusals: a request that
// reached it without a token in its context is 401, whatever the header.
func TestAPIWithoutMiddleware(t *testing.T) {
	api := platformtools.NewAPI(testAPIOptions())
	for _, tc := range []struct {
		name, method, path string
		ctxToken           bool
		wantStatus         int
		wantCode           string
	}{
		{"no token in context", http.MethodGet, platformtools.PathWhoami, false, 401, "unauthenticated"},
		{"token in context", http.MethodGet, platformtools.PathWhoami, true, 200, ""},
		{"HEAD", http.MethodHead, platformtools.PathAgents, true, 200, ""},
		{"POST", http.MethodPost, platformtools.PathWhoami, true, 405, "method_not_allowed"},
		{"DELETE unauthenticated is still 405", http.MethodDelete, platformtools.PathContexts, false, 405, "method_not_allowed"},
		{"trailing slash", http.MethodGet, platformtools.PathWhoami + "/", true, 404, "not_found"},
		{"mcp path is not ours", http.MethodGet, "/api/v1/mcp", true, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(testCtx(t), tc.method, tc.path, nil)
			req.Header.Set("Authorization", "Bearer whatever")
			if tc.ctxToken {
				req = req.WithContext(store.WithToken(req.Context(), fullToken(), "whatever"))
			}
			w := httptest.NewRecorder()
			api.ServeHTTP(w, req)
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.wantStatus, w.Body)
			}
			if tc.wantCode != "" && !strings.Contains(w.Body.String(), `"error":"`+tc.wantCode+`"`) {
				t.Errorf("body %s lacks error %q", w.Body, tc.wantCode)
			}
			if tc.wantStatus == 405 && w.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("405 with Allow %q", w.Header().Get("Allow"))
			}
		})
	}
}

func TestAPIAgentsEdgeCases(t *testing.T) {
	tok := fullToken()
	for _, tc := range []struct {
		name string
		opts platformtools.APIOptions
		want string
	}{
		{"no sources", platformtools.APIOptions{}, `{"agents":[]}`},
		{"agents nil, tools empty", platformtools.APIOptions{
			Agents:     func() []platformtools.AgentInfo { return nil },
			AgentTools: func(context.Context, store.Token) ([]platformtools.AgentTool, error) { return nil, nil },
		}, `{"agents":[],"tools":[]}`},
		{"tools fail", platformtools.APIOptions{
			AgentTools: func(context.Context, store.Token) ([]platformtools.AgentTool, error) {
				return nil, errors.New("no expert agent is online")
			},
		}, `{"agents":[],"toolsError":"the expert agents did not list their tools: no expert agent is online"}`},
		{"tools time out", platformtools.APIOptions{
			ToolsTimeout: 20 * time.Millisecond,
			AgentTools: func(ctx context.Context, _ store.Token) ([]platformtools.AgentTool, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
		}, `{"agents":[],"toolsError":"the expert agents did not list their tools: context deadline exceeded"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(store.WithToken(testCtx(t), tok, "s"), http.MethodGet, platformtools.PathAgents, nil)
			w := httptest.NewRecorder()
			platformtools.NewAPI(tc.opts).ServeHTTP(w, req)
			if w.Code != 200 || !jsonEqual(t, w.Body.Bytes(), []byte(tc.want)) {
				t.Errorf("got %d %s, want 200 %s", w.Code, w.Body, tc.want)
			}
		})
	}
}

// TestAPIAgentsOfLimitedTokens: a token limited to some agents, by its own
// list or by its user's grant (`toolbus agents grant`), sees those agents'
// instances and tools alone through GET /api/v1/agents, over HTTP with
// real tokens.
func TestAPIAgentsOfLimitedTokens(t *testing.T) {
	s := openStore(t)
	srv := apiServer(t, s, testAPIOptions())
	if err := s.SetUserAgents(testCtx(t), "dave", []string{"counter"}); err != nil {
		t.Fatal(err)
	}
	echoer, _ := createToken(t, s, store.TokenSpec{UserID: "alice", Agents: []string{"echoer"}})
	counter, _ := createToken(t, s, store.TokenSpec{UserID: "alice", Agents: []string{"counter"}})
	granted, _ := createToken(t, s, store.TokenSpec{UserID: "dave"})
	outside, _ := createToken(t, s, store.TokenSpec{UserID: "dave", Agents: []string{"echoer"}}) // outside dave's grant: no agent
	for _, tc := range []struct {
		name, secret, want string
	}{
		{"limited to echoer", echoer,
			`{"agents":[{"agent":"echoer","clientId":"echo-a","name":"echo","version":"1.0","online":true,"since":"2025-11-25T10:00:00Z"},` +
				`{"agent":"echoer","clientId":"echo-b","name":"echo","version":"1.0","online":false,"since":"2025-11-25T10:01:00Z"}],` +
				`"tools":[{"name":"echo","agent":"echoer","title":"Echo","description":"Says it back."}]}`},
		{"limited to counter", counter, `{"agents":[],"tools":[{"name":"word_count","agent":"counter"}]}`},
		{"user granted counter", granted, `{"agents":[],"tools":[{"name":"word_count","agent":"counter"}]}`},
		{"own list outside the grant", outside, `{"agents":[],"tools":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := get(t, srv, platformtools.PathAgents, tc.secret)
			if status != 200 || !jsonEqual(t, body, []byte(tc.want)) {
				t.Errorf("GET %s = %d\n%s\nwant\n%s", platformtools.PathAgents, status, body, tc.want)
			}
		})
	}
}
