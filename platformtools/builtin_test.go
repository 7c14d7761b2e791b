package platformtools_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// platform is a store, the API behind the bearer middleware, a real HTTP
// server for it, and a registry with the built-in tools injecting into the
// same router.
type platform struct {
	store *store.Store
	srv   *httptest.Server
	reg   *platformtools.Registry
}

func newPlatform(t *testing.T) *platform {
	t.Helper()
	s := openStore(t)
	router := platformRouter(s, platformtools.NewAPI(testAPIOptions()))
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	reg := newRegistry(t, router, nil) // CheckOutput on: results must match the output schemas
	if err := platformtools.Register(reg); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return &platform{store: s, srv: srv, reg: reg}
}

func TestBuiltinsMatchTheirEndpoints(t *testing.T) {
	p := newPlatform(t)
	secret, tok := createToken(t, p.store, store.TokenSpec{UserID: "alice"})
	narrowSecret, narrowTok := createToken(t, p.store, store.TokenSpec{UserID: "alice", ReadOnly: true,
		Entities: []store.Entity{{Type: "project", ID: "p1"}}})
	for _, tc := range []struct {
		tool, path, secret string
		tok                store.Token
		entity             store.Entity
	}{
		{platformtools.ToolWhoami, platformtools.PathWhoami, secret, tok, store.PlainEntity},
		{platformtools.ToolAgents, platformtools.PathAgents, secret, tok, store.PlainEntity},
		{platformtools.ToolContexts, platformtools.PathContexts, secret, tok, store.PlainEntity},
		{platformtools.ToolWhoami, platformtools.PathWhoami, narrowSecret, narrowTok, store.Entity{Type: "project", ID: "p1"}},
		{platformtools.ToolContexts, platformtools.PathContexts, narrowSecret, narrowTok, store.Entity{Type: "project", ID: "p1"}},
	} {
		t.Run(tc.tool+"/"+tc.tok.ID, func(t *testing.T) {
			c := plainContext(tc.tok.UserID)
			c.EntityType, c.EntityID = tc.entity.Type, tc.entity.ID
			res := callTool(t, p.reg, &platformtools.Call{Name: tc.tool, Token: tc.tok, Secret: tc.secret, Context: c})
			if res.IsError {
				t.Fatalf("isError: %s", res.text())
			}
			status, _, body := get(t, p.srv, tc.path, tc.secret)
			if status != 200 {
				t.Fatalf("GET %s over HTTP: %d %s", tc.path, status, body)
			}
			if !jsonEqual(t, res.StructuredContent, body) {
				t.Errorf("structuredContent %s\n!= GET %s %s", res.StructuredContent, tc.path, body)
			}
			if len(res.Content) != 1 || res.Content[0].Type != "text" || !jsonEqual(t, []byte(res.Content[0].Text), body) {
				t.Errorf("content %+v: want one text content holding the endpoint's JSON", res.Content)
			}
		})
	}
}

// TestBuiltinsGoThroughTheAPIChecks shows that the API's own checks apply
// to injected requests: the registry lets these calls run, and the REST
// handler, seeing the forwarded token, refuses them.
func TestBuiltinsGoThroughTheAPIChecks(t *testing.T) {
	p := newPlatform(t)
	revokedSecret, revokedTok := createToken(t, p.store, store.TokenSpec{UserID: "alice"})
	if err := p.store.RevokeToken(testCtx(t), revokedTok.ID); err != nil {
		t.Fatal(err)
	}
	callOnly, callOnlyTok := createToken(t, p.store, store.TokenSpec{UserID: "alice", Scopes: []string{store.ScopeToolsCall}})
	bobSecret, _ := createToken(t, p.store, store.TokenSpec{UserID: "bob"})
	_, aliceTok := createToken(t, p.store, store.TokenSpec{UserID: "alice"})

	for _, tc := range []struct {
		name, tool, secret string
		tok                store.Token
		wantErr            bool
		want               []string
	}{
		{"revoked token", platformtools.ToolWhoami, revokedSecret, revokedTok, true, []string{"HTTP 401", "unauthenticated", "token revoked"}},
		{"no secret forwarded", platformtools.ToolWhoami, "", aliceTok, true, []string{"HTTP 401", "unauthenticated"}},
		{"token without tools:list", platformtools.ToolAgents, callOnly, callOnlyTok, true, []string{"HTTP 403", "forbidden", "tools:list"}},
		{"identity comes from the forwarded secret", platformtools.ToolWhoami, bobSecret, aliceTok, false, []string{`"user":"bob"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callTool(t, p.reg, &platformtools.Call{Name: tc.tool, Token: tc.tok, Secret: tc.secret, Context: plainContext(tc.tok.UserID)})
			if res.IsError != tc.wantErr {
				t.Fatalf("isError = %v, want %v: %s", res.IsError, tc.wantErr, res.text())
			}
			for _, w := range tc.want {
				if !strings.Contains(res.text(), w) {
					t.Errorf("text %q lacks %q", res.text(), w)
				}
			}
			if tc.wantErr && !strings.HasPrefix(res.text(), tc.tool+": GET ") {
				t.Errorf("text %q: want it to name the tool and the request", res.text())
			}
		})
	}
}

func TestBuiltinsDefinitions(t *testing.T) {
	p := newPlatform(t)
	var names []string
	for _, tl := range p.reg.Tools() {
		names = append(names, tl.Name)
		if !tl.ReadOnly() || tl.Scope != "" || tl.Title == "" || tl.Description == "" {
			t.Errorf("%s: want a read-only, unscoped tool with a title and a description: %+v", tl.Name, tl)
		}
		raw, err := json.Marshal(tl)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"} {
			if k == "outputSchema" && tl.Name == platformtools.ToolEcho {
				continue // returns plain text, no structured content
			}
			if _, ok := m[k]; !ok {
				t.Errorf("%s: MCP tool JSON lacks %q: %s", tl.Name, k, raw)
			}
		}
		if string(m["annotations"]) != `{"title":"`+tl.Title+`","readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}` {
			t.Errorf("%s: annotations %s", tl.Name, m["annotations"])
		}
	}
	if got := strings.Join(names, ","); got != "platform_agents,platform_contexts,platform_echo,platform_whoami" {
		t.Errorf("built-in tools %s", got)
	}

	// No arguments means no arguments.
	res := callTool(t, p.reg, &platformtools.Call{Name: platformtools.ToolWhoami, Arguments: json.RawMessage(`{"user":"bob"}`), Token: fullToken()})
	if !res.IsError || !strings.Contains(res.text(), `unknown argument "user"`) {
		t.Errorf("whoami with an argument: %+v", res)
	}

	if err := platformtools.Register(p.reg); !errors.Is(err, platformtools.ErrInvalidTool) {
		t.Errorf("second Register: err = %v, want ErrInvalidTool (duplicates)", err)
	}
}

// TestInjectDoesNotLeakCallerToken: the caller's request context holds its
// authenticated token; an injected request must not carry it, so that a REST
// handler is reached only through its own auth (here: none in front, so 401).
func TestInjectDoesNotLeakCallerToken(t *testing.T) {
	reg := newRegistry(t, platformtools.NewAPI(testAPIOptions()), nil)
	if err := platformtools.Register(reg); err != nil {
		t.Fatal(err)
	}
	ctx := store.WithToken(testCtx(t), fullToken(), "tb_testtest_secret")
	raw, err := reg.Call(ctx, &platformtools.Call{Name: platformtools.ToolWhoami, Token: fullToken(), Secret: "tb_testtest_secret", Context: plainContext("alice")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"isError":true`) || !strings.Contains(string(raw), "HTTP 401") {
		t.Errorf("result %s: want isError with HTTP 401", raw)
	}
}
