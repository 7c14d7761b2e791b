package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// Two gateway replicas (each its own platform ID, one session secret, one
// PostgreSQL store) on one Mosquitto configured from `acl export` of that
// store, and two workers in one share group: 2 000 calls across 200
// sessions, each session's requests alternating between the replicas. Every
// call is answered once, with its own text, to its own caller; both workers
// and both replicas take part. Then a session ended (DELETE) on replica A is
// refused by replica B.
func TestScaleOutReplicasAndPool(t *testing.T) {
	const (
		sessions        = 200
		callsPerSession = 10
		clients         = 16 // sessions driven at once
	)
	so := startScaleOut(t)
	// The strict setting: every request asks the store whether its session
	// was ended elsewhere (the default trusts a "no" for 1s).
	cfg := server.Config{EndedSessionsCacheTTL: -1}
	a, b := so.replica(t, cfg), so.replica(t, cfg)
	so.worker(t, false)
	so.worker(t, false)
	tok := a.token(t, store.TokenSpec{UserID: "alice"}) // in the shared store: B knows it too

	ctx := testCtx(t, 120*time.Second)
	tr := newAlternating(tok, so.replicas)
	answered, failures := echoAlternating(ctx, tr, sessions, callsPerSession, clients, func(int, int) string { return "echo" })
	for _, f := range failures {
		t.Error(f)
	}
	if want := sessions * callsPerSession; answered != want {
		t.Fatalf("%d calls answered correctly, want %d", answered, want)
	}
	var served int64
	for _, w := range so.workers {
		n := w.calls.Load()
		t.Logf("worker %s served %d calls", w.clientID, n)
		if n == 0 {
			t.Errorf("worker %s served no call: the share group did not share", w.clientID)
		}
		served += n
	}
	if served != sessions*callsPerSession {
		t.Errorf("workers served %d calls in all, want %d: a request was served twice or not at all", served, sessions*callsPerSession)
	}
	for i := range so.replicas {
		t.Logf("replica %s got %d HTTP requests", so.replicas[i].srv.PlatformID(), tr.per[i].Load())
		if tr.per[i].Load() < sessions*callsPerSession/3 {
			t.Errorf("replica %s got %d requests: the sessions did not alternate", so.replicas[i].srv.PlatformID(), tr.per[i].Load())
		}
	}

	// A session ended on A is refused on B (and on A).
	id := soInitialize(t, a, tok)
	if code, body := soPost(t, b, tok, id, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"before"}}}`); code != http.StatusOK {
		t.Fatalf("call on B before the DELETE: %d %s", code, body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, a.mcpURL(), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE on A = %d, want 204", resp.StatusCode)
	}
	for _, g := range []*gwEnv{b, a, b} {
		code, body := soPost(t, g, tok, id, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"after"}}}`)
		if code != http.StatusNotFound || !strings.Contains(body, "session ended") {
			t.Fatalf("call on %s after the DELETE on A = %d %s; want 404 session ended", g.srv.PlatformID(), code, body)
		}
	}
}

// soInitialize opens a legacy-era session with a plain POST and returns
// its ID.
func soInitialize(t *testing.T, g *gwEnv, tok string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodPost, g.mcpURL(), strings.NewReader(
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize = %d, session %q", resp.StatusCode, id)
	}
	return id
}

// soPost sends one JSON-RPC request on a session and returns the status
// and body.
func soPost(t *testing.T, g *gwEnv, tok, session, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 20*time.Second), http.MethodPost, g.mcpURL(), strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// A worker of the pool that dies mid-call (its connection dropped: the
// broker sends its Last Will): the other worker keeps serving, during and
// after, and the dead worker's call ends with a clear tool error. With
// another worker online the gateway cannot tell which worker had the call
// (the v1 contract names no worker in requests or replies), so that call
// ends at the call deadline rather than at the Will; see docs/scale-out.md.
func TestScaleOutWorkerDies(t *testing.T) {
	so := startScaleOut(t)
	const callTimeout = 4 * time.Second
	g := so.replica(t, server.Config{CallTimeout: callTimeout})
	doomed := so.worker(t, true)
	survivor := so.worker(t, false)
	tok := g.token(t, store.TokenSpec{UserID: "alice"})
	cs := g.connect(t, g.mcpURL(), tok, "2025-11-25", nil)
	ctx := testCtx(t, 60*time.Second)

	// Hold calls until one lands on the doomed worker (the share group
	// alternates; the survivor answers its share at once).
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	heldResult := make(chan outcome, 1)
	var heldText string
	for i := 0; heldText == ""; i++ {
		if i == 20 {
			t.Fatal("no hold call reached the doomed worker in 20 tries")
		}
		text := fmt.Sprintf("hold %d", i)
		done := make(chan outcome, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{"text": text}})
			done <- outcome{res, err}
		}()
		select {
		case got := <-doomed.held:
			heldText = got
			go func() { heldResult <- <-done }()
		case o := <-done:
			if o.err != nil || o.res.IsError || textOf(t, o.res) != "passed" {
				t.Fatalf("hold on the survivor: %+v %v", o.res, o.err)
			}
		case <-ctx.Done():
			t.Fatal("hold call neither held nor answered")
		}
	}

	doomed.kill()
	poll(t, 10*time.Second, "the gateway to see the doomed worker offline (Will)", func() bool { return !agentOnline(g.srv, doomed.clientID) })
	before := survivor.calls.Load()
	for i := range 50 {
		want := fmt.Sprintf("after the death %d", i)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": want}})
		if err != nil || res.IsError || textOf(t, res) != want {
			t.Fatalf("call %d after the worker died: %+v %v", i, res, err)
		}
	}
	if n := survivor.calls.Load() - before; n != 50 {
		t.Fatalf("the survivor served %d of the 50 calls after the death, want all", n)
	}

	o := <-heldResult
	if o.err != nil {
		t.Fatalf("the dead worker's call: protocol error %v; want a tool result with isError", o.err)
	}
	if !o.res.IsError {
		t.Fatalf("the dead worker's call (%s) = %+v; want isError", heldText, o.res)
	}
	t.Logf("the dead worker's call ended with: %s", textOf(t, o.res))
}
