package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/buildinfo"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// Tools over REST (issue 36): POST /api/v1/tools/{name} calls a tool with
// the body as its arguments, GET /api/v1/tools lists what the token sees,
// through the MCP endpoint's own checks, limits, audit and agent round trip.

// restHasher and restOther are the expert agents of these tests.
const (
	restHasher = "hasher"
	restOther  = "other"
)

// startRESTAgent runs an expert agent with tools and waits until the
// gateway sees it online; it stops when the test ends.
func startRESTAgent(t *testing.T, srv *server.Server, name string, tools ...expertagent.Tool) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := srv.Store().AddIdentity(ctx, name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: agentPassword,
		ClientID: name + "-1", Name: name, Logger: testLogger(t).WithField("component", name),
	})
	for _, tl := range tools {
		if err := a.AddTool(tl); err != nil {
			t.Fatal(err)
		}
	}
	runUntilCleanup(t, "agent "+name, a.Run)
	poll(t, 15*time.Second, "agent "+name+" online", func() bool { return agentOnline(srv, name+"-1") })
}

// hasherTools are the hasher's tools: sha256 (read-only, structured),
// store_note (a write tool), refuse (an isError result).
func hasherTools() []expertagent.Tool {
	yes, no := true, false
	return []expertagent.Tool{
		{
			Tool: tbmcp.Tool{
				Name:         "sha256",
				Title:        "SHA-256",
				Description:  "Returns the SHA-256 digest of a text, in hex.",
				InputSchema:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
				OutputSchema: json.RawMessage(`{"type":"object","properties":{"digest":{"type":"string"}},"required":["digest"]}`),
				Annotations:  &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
			},
			Handler: func(_ context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				var a struct {
					Text string `json:"text"`
				}
				if err := req.Bind(&a); err != nil {
					return nil, err
				}
				sum := sha256.Sum256([]byte(a.Text))
				return tbmcp.JSONResult(map[string]string{"digest": hex.EncodeToString(sum[:])}), nil
			},
		},
		{
			Tool: tbmcp.Tool{
				Name:        "store_note",
				Description: "Stores a note (a write).",
				InputSchema: json.RawMessage(`{"type":"object"}`),
				Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &no},
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				return tbmcp.TextResult("stored"), nil
			},
		},
		{
			Tool: tbmcp.Tool{
				Name:        "refuse",
				Description: "Always fails as a tool.",
				Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				return tbmcp.ErrorResult("no, never"), nil
			},
		},
	}
}

// secretTool is the other agent's tool, hidden from tokens limited to the
// hasher.
func secretTool() expertagent.Tool {
	yes := true
	return expertagent.Tool{
		Tool: tbmcp.Tool{Name: "secret", Description: "Another agent's tool.", Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes}},
		Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			return tbmcp.TextResult("the secret"), nil
		},
	}
}

// restReply is one HTTP answer.
type restReply struct {
	status int
	header http.Header
	body   []byte
}

// restDo sends method url with body ("" sends none) and token ("" none),
// with no Content-Type, as a script would.
func restDo(t *testing.T, method, url, token, body string) restReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(testCtx(t, 20*time.Second), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return restReply{resp.StatusCode, resp.Header, b}
}

// want fails the test unless the reply has status and, when code is not
// "", the error body {"error": code, ...}.
func (r restReply) want(t *testing.T, what string, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: HTTP %d, want %d: %s", what, r.status, status, r.body)
	}
	if code == "" {
		return
	}
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error != code || e.Message == "" {
		t.Fatalf("%s: body %s, want {\"error\": %q, \"message\": ...}", what, r.body, code)
	}
}

// digestA is the SHA-256 of "a".
const digestA = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"

// TestRESTTools: the curl case of the issue returns the digest (net/http
// and the curl binary); a tool the token may not see is 404 with the very
// body of a tool that does not exist; a read-only token calling a write
// tool is 403, a token without tools:call too; no token is 401; a tool's
// isError result is 422; a platform tool answers its content; the calls
// are audited as MCP's are; GET lists the token's tools with their schemas
// and the build identity.
func TestRESTTools(t *testing.T) {
	srv := startServer(t, server.Config{Audit: server.AuditConfig{FlushInterval: 50 * time.Millisecond}})
	startRESTAgent(t, srv, restHasher, hasherTools()...)
	startRESTAgent(t, srv, restOther, secretTool())
	base := "http://" + srv.HTTPAddr().String()
	tools := base + gateway.ToolsPath
	mint := func(spec store.TokenSpec) string { return servertest.Token(t, srv, spec) }
	full := mint(store.TokenSpec{UserID: "rita"})
	hasherOnly := mint(store.TokenSpec{UserID: "hana", Agents: []string{restHasher}})
	readOnly := mint(store.TokenSpec{UserID: "rory", ReadOnly: true})
	listOnly := mint(store.TokenSpec{UserID: "lena", Scopes: []string{store.ScopeToolsList}})

	t.Run("sha256", func(t *testing.T) {
		r := restDo(t, http.MethodPost, tools+"/sha256", full, `{"text":"a"}`)
		r.want(t, "POST sha256", http.StatusOK, "")
		var out struct {
			Digest string `json:"digest"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil || out.Digest != digestA {
			t.Fatalf("POST sha256: %s, want the structured content {\"digest\": %q}", r.body, digestA)
		}
	})

	t.Run("curl", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Skip("curl is not installed")
		}
		// As the docs show it: -d, so curl's own form Content-Type.
		cmd := exec.CommandContext(testCtx(t, 20*time.Second), curl, "-sS", "-X", "POST", tools+"/sha256",
			"-H", "Authorization: Bearer "+full, "-d", `{"text":"a"}`, "-w", `\n%{http_code}`)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		// -w adds the status on a line of its own, after the body.
		text := strings.TrimSpace(string(out))
		i := strings.LastIndexByte(text, '\n')
		body, code := text[:max(i, 0)], text[i+1:]
		if code != "200" || !strings.Contains(body, `"digest":"`+digestA+`"`) {
			t.Fatalf("curl: HTTP %s %s, want 200 and the digest", code, body)
		}
	})

	t.Run("404 alike for unknown and hidden", func(t *testing.T) {
		// The other agent's tool is there, and callable by an unlimited token.
		restDo(t, http.MethodPost, tools+"/secret", full, "").want(t, "full token: secret", http.StatusOK, "")
		hidden := restDo(t, http.MethodPost, tools+"/secret", hasherOnly, `{}`)
		hidden.want(t, "limited token: secret", http.StatusNotFound, "unknown_tool")
		unknown := restDo(t, http.MethodPost, tools+"/no_such_tool", hasherOnly, `{}`)
		unknown.want(t, "unknown tool", http.StatusNotFound, "unknown_tool")
		invalid := restDo(t, http.MethodPost, tools+"/bad$name", hasherOnly, `{}`)
		invalid.want(t, "invalid name", http.StatusNotFound, "unknown_tool")
		restDo(t, http.MethodPost, tools+"/bad%01name%E2%80%A8", hasherOnly, `{}`).want(t, "control characters", http.StatusNotFound, "unknown_tool")
		if !bytes.Equal(hidden.body, unknown.body) || !bytes.Equal(hidden.body, invalid.body) {
			t.Fatalf("bodies differ:\nhidden  %s\nunknown %s\ninvalid %s", hidden.body, unknown.body, invalid.body)
		}
	})

	t.Run("read-only token", func(t *testing.T) {
		restDo(t, http.MethodPost, tools+"/store_note", readOnly, `{}`).want(t, "read-only: store_note", http.StatusForbidden, "forbidden")
		restDo(t, http.MethodPost, tools+"/sha256", readOnly, `{"text":"a"}`).want(t, "read-only: sha256", http.StatusOK, "")
		restDo(t, http.MethodPost, tools+"/store_note", full, `{}`).want(t, "full: store_note", http.StatusOK, "")
	})

	t.Run("scope and token", func(t *testing.T) {
		r := restDo(t, http.MethodPost, tools+"/sha256", listOnly, `{"text":"a"}`)
		r.want(t, "without tools:call", http.StatusForbidden, "forbidden")
		if !strings.Contains(r.header.Get("WWW-Authenticate"), store.ScopeToolsCall) {
			t.Errorf("without tools:call: WWW-Authenticate %q does not name the scope", r.header.Get("WWW-Authenticate"))
		}
		r = restDo(t, http.MethodPost, tools+"/sha256", "", `{"text":"a"}`)
		r.want(t, "no token", http.StatusUnauthorized, "unauthenticated")
		restDo(t, http.MethodGet, tools, "", "").want(t, "GET, no token", http.StatusUnauthorized, "unauthenticated")
		restDo(t, http.MethodPost, tools+"/sha256", "tb_not-a-token", `{}`).want(t, "bad token", http.StatusUnauthorized, "unauthenticated")
		narrowed := mint(store.TokenSpec{UserID: "nina", Entities: []store.Entity{{Type: "doc", ID: "d1"}}})
		restDo(t, http.MethodPost, tools+"/sha256", narrowed, `{"text":"a"}`).want(t, "entity-narrowed token", http.StatusForbidden, "forbidden_entity")
	})

	t.Run("bodies and results", func(t *testing.T) {
		for _, body := range []string{`[1]`, `"a"`, `{"text":`, "\xff"} {
			restDo(t, http.MethodPost, tools+"/sha256", full, body).want(t, "body "+body, http.StatusBadRequest, "invalid_arguments")
		}
		r := restDo(t, http.MethodPost, tools+"/refuse", full, "")
		r.want(t, "isError result", http.StatusUnprocessableEntity, "")
		var res struct {
			IsError bool `json:"isError"`
			Content []struct{ Text string }
		}
		if err := json.Unmarshal(r.body, &res); err != nil || !res.IsError || len(res.Content) != 1 || res.Content[0].Text != "no, never" {
			t.Fatalf("isError result: %s, want the result whole", r.body)
		}
		r = restDo(t, http.MethodPost, tools+"/platform_echo", full, `{"text":"hi"}`)
		r.want(t, "platform_echo", http.StatusOK, "")
		var echo struct {
			Content []struct{ Type, Text string }
		}
		if err := json.Unmarshal(r.body, &echo); err != nil || len(echo.Content) != 1 || echo.Content[0].Text != "hi" {
			t.Fatalf("platform_echo: %s, want {\"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}", r.body)
		}
		restDo(t, http.MethodGet, tools+"/sha256", full, "").want(t, "GET a tool", http.StatusMethodNotAllowed, "method_not_allowed")
	})

	t.Run("audit", func(t *testing.T) {
		st := srv.Store()
		ok := waitAudit(t, st, "rita's sha256 call", store.AuditQuery{Kind: store.AuditToolCall, User: "rita", Tool: "sha256"}, 2)
		for _, rec := range ok {
			if rec.Outcome != gateway.OutcomeOK || rec.Source != gateway.SourceAgent || rec.Agent != restHasher ||
				rec.TokenID != store.TokenIDOf(full) || rec.RequestID == "" {
				t.Errorf("record %+v: want outcome ok from the hasher agent, rita's token, a request ID", rec)
			}
		}
		ro := waitAudit(t, st, "rory's refused store_note", store.AuditQuery{Kind: store.AuditToolCall, User: "rory", Tool: "store_note"}, 1)
		if ro[0].Outcome != gateway.OutcomeRefused || ro[0].Reason != "forbidden" {
			t.Errorf("record %+v: want refused, forbidden", ro[0])
		}
		hid := waitAudit(t, st, "hana's hidden call", store.AuditQuery{Kind: store.AuditToolCall, User: "hana", Tool: "secret"}, 1)
		if hid[0].Outcome != gateway.OutcomeRefused || hid[0].Reason != "unknown_tool" {
			t.Errorf("record %+v: want refused, unknown_tool", hid[0])
		}
		pe := waitAudit(t, st, "platform_echo call", store.AuditQuery{Kind: store.AuditToolCall, User: "rita", Tool: "platform_echo"}, 1)
		if pe[0].Source != gateway.SourcePlatform || pe[0].Outcome != gateway.OutcomeOK {
			t.Errorf("record %+v: want a platform call, ok", pe[0])
		}
		waitAudit(t, st, "the 401", store.AuditQuery{Kind: store.AuditRefused}, 1)
	})

	t.Run("list", func(t *testing.T) {
		type listed struct {
			Server map[string]any `json:"server"`
			Tools  []struct {
				Name         string          `json:"name"`
				Title        string          `json:"title"`
				Description  string          `json:"description"`
				InputSchema  json.RawMessage `json:"inputSchema"`
				OutputSchema json.RawMessage `json:"outputSchema"`
				Annotations  json.RawMessage `json:"annotations"`
			} `json:"tools"`
		}
		list := func(token string) (listed, map[string]int) {
			t.Helper()
			r := restDo(t, http.MethodGet, tools, token, "")
			r.want(t, "GET "+gateway.ToolsPath, http.StatusOK, "")
			var l listed
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatalf("GET: %v: %s", err, r.body)
			}
			idx := map[string]int{}
			for i, tl := range l.Tools {
				idx[tl.Name] = i
			}
			return l, idx
		}
		l, idx := list(full)
		for _, k := range []string{"name", "version", "revision", "buildTime"} {
			if _, ok := l.Server[k]; !ok {
				t.Errorf("server %v: no %q", l.Server, k)
			}
		}
		if l.Server["name"] != "toolbus" || l.Server["version"] != buildinfo.Version() {
			t.Errorf("server %v: want serverInfo's name toolbus and version %q", l.Server, buildinfo.Version())
		}
		for _, name := range []string{"sha256", "store_note", "refuse", "secret", "platform_echo"} {
			if _, ok := idx[name]; !ok {
				t.Errorf("GET: no %s in %v", name, idx)
			}
		}
		if i, ok := idx["sha256"]; ok {
			s := l.Tools[i]
			if s.Title != "SHA-256" || !strings.Contains(string(s.InputSchema), `"text"`) ||
				!strings.Contains(string(s.OutputSchema), `"digest"`) || !strings.Contains(string(s.Annotations), `"readOnlyHint":true`) {
				t.Errorf("sha256 listed as %+v: want its title, schemas and annotations", s)
			}
		}
		_, idx = list(hasherOnly)
		if _, ok := idx["secret"]; ok {
			t.Errorf("a token limited to %s lists the other agent's tool: %v", restHasher, idx)
		}
		if _, ok := idx["sha256"]; !ok {
			t.Errorf("a token limited to %s does not list sha256: %v", restHasher, idx)
		}
		restDo(t, http.MethodPost, tools, full, "").want(t, "POST the list", http.StatusMethodNotAllowed, "method_not_allowed")
		noList := mint(store.TokenSpec{UserID: "cal", Scopes: []string{store.ScopeToolsCall}})
		restDo(t, http.MethodGet, tools, noList, "").want(t, "GET without tools:list", http.StatusForbidden, "forbidden")
	})

	t.Run("no agent online", func(t *testing.T) {
		ghost := mint(store.TokenSpec{UserID: "gus", Agents: []string{"ghost"}})
		restDo(t, http.MethodPost, tools+"/anything", ghost, `{}`).want(t, "only an offline agent", http.StatusServiceUnavailable, "no_agent")
	})
}

// TestRESTToolsRateLimit: the expert-agent tools limit applies to REST
// calls as to MCP's, 429 with Retry-After, across callers.
func TestRESTToolsRateLimit(t *testing.T) {
	srv := startServer(t, server.Config{RateLimits: gateway.RateLimits{AgentTools: gateway.Limit{PerMinute: 1, Burst: 2}}})
	startRESTAgent(t, srv, restHasher, hasherTools()...)
	url := "http://" + srv.HTTPAddr().String() + gateway.ToolsPath + "/sha256"
	a := servertest.Token(t, srv, store.TokenSpec{UserID: "ann"})
	b := servertest.Token(t, srv, store.TokenSpec{UserID: "bob"})
	statuses := map[int]int{}
	var last restReply
	for _, tok := range []string{a, b, a} {
		last = restDo(t, http.MethodPost, url, tok, `{"text":"a"}`)
		statuses[last.status]++
	}
	if statuses[http.StatusOK] != 2 {
		t.Fatalf("statuses %v: want the burst of 2 served", statuses)
	}
	last.want(t, "third call", http.StatusTooManyRequests, "rate_limited")
	if last.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %v", last.header)
	}
}
