package integration

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// A legacy session hears of agents coming and going on its GET stream: the
// go-sdk client's ToolListChangedHandler runs, and tools/list follows. The
// DELETE that ends the session ends the stream.
func TestToolListChangedOnGETStream(t *testing.T) {
	e := startGateway(t, server.Config{})
	gw := e.srv.Handler().(*gateway.Gateway)
	tok := e.token(t, store.TokenSpec{UserID: "alice"})
	changed := make(chan struct{}, 8)
	cs := e.connect(t, e.mcpURL(), tok, "2025-11-25", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	if caps := cs.InitializeResult().Capabilities; caps.Tools == nil || !caps.Tools.ListChanged {
		t.Fatalf("initialize declares no tools.listChanged: %+v", caps.Tools)
	}
	// go-sdk opens its GET stream after initialize, on its own goroutine: a
	// change before the gateway holds it would reach nobody.
	poll(t, 10*time.Second, "the session's GET stream", func() bool { return gw.ListeningStreams() == 1 })

	hasEcho := func() bool {
		t.Helper()
		list, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list.Tools, func(tool *mcp.Tool) bool { return tool.Name == "echo" })
	}
	waitChanged := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notifications/tools/list_changed after %s", what)
		}
	}
	if !hasEcho() {
		t.Fatal("echo is not listed while its agent is online")
	}
	e.agentStop()
	waitChanged("the agent stopped")
	if hasEcho() {
		t.Error("echo is still listed after list_changed said its agent went")
	}
	e.agentStop = startTestAgent(t, e.srv, "tagent")
	waitChanged("the agent came back")
	poll(t, 10*time.Second, "echo listed again", hasEcho)

	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the GET stream to end with the session", func() bool { return gw.ListeningStreams() == 0 })
}

// What GET on the MCP endpoint refuses: one stream per session, a session
// that exists and is the caller's, a client that takes an event stream, the
// legacy wire only.
func TestGETStreamRefusals(t *testing.T) {
	e := startHostile(t, server.Config{})
	gw := e.srv.Handler().(*gateway.Gateway)
	sid := e.session(t, e.tok)
	get := func(t *testing.T, token, session string, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, e.base+"/api/v1/mcp", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	first := get(t, e.tok, sid, nil)
	if first.StatusCode != http.StatusOK || first.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET = %d %s, want 200 text/event-stream", first.StatusCode, first.Header.Get("Content-Type"))
	}
	poll(t, 10*time.Second, "the stream to be held", func() bool { return gw.ListeningStreams() == 1 })
	for _, tc := range []struct {
		name    string
		token   string
		session string
		hdr     map[string]string
		status  int
	}{
		{"a second stream", e.tok, sid, nil, http.StatusConflict},
		{"no session", e.tok, "", nil, http.StatusBadRequest},
		{"a forged session", e.tok, sid + "x", nil, http.StatusNotFound},
		{"another token", e.ro, sid, nil, http.StatusNotFound},
		{"JSON only", e.tok, sid, map[string]string{"Accept": "application/json"}, http.StatusNotAcceptable},
		{"the 2026 wire", e.tok, sid, map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := get(t, tc.token, tc.session, tc.hdr)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Errorf("GET = %d %s, want %d", resp.StatusCode, body, tc.status)
			}
		})
	}

	// Ending the session ends its stream: the body reaches EOF.
	del, err := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodDelete, e.base+"/api/v1/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	del.Header.Set("Authorization", "Bearer "+e.tok)
	del.Header.Set("Mcp-Session-Id", sid)
	if r := e.do(t, del); r.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", r.status, r.raw)
	}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, first.Body); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stream ended with %v, want EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the GET stream outlived its session")
	}
}

// On the 2026 wire the go-sdk client opens subscriptions/listen itself
// (discover declares tools.listChanged and it has a handler): it hears
// agents come and go there, and closing the client ends the stream.
func TestToolListChangedOnListenStream(t *testing.T) {
	e := startGateway(t, server.Config{})
	gw := e.srv.Handler().(*gateway.Gateway)
	tok := e.token(t, store.TokenSpec{UserID: "alice"})
	changed := make(chan struct{}, 8)
	cs := e.connect(t, e.mcpURL(), tok, "2026-07-28", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	poll(t, 10*time.Second, "the client's listen stream", func() bool { return gw.ListeningStreams() == 1 })
	for _, step := range []struct {
		what string
		do   func()
	}{
		{"the agent stopped", func() { e.agentStop() }},
		{"the agent came back", func() { e.agentStop = startTestAgent(t, e.srv, "tagent") }},
	} {
		step.do()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notifications/tools/list_changed after %s", step.what)
		}
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the listen stream to end with the client", func() bool { return gw.ListeningStreams() == 0 })
}
