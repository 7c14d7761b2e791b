package integration

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestSessionFlood: 200 initializes of 2 MiB from one list-only token (the
// report: they grew the heap by about 1 GB, each session pinning its body
// for its 24 h idle life) leave the token's live sessions at the default
// bound; every session evicted by the bound answers 404 (-32600) as a
// deleted one does, and every live one works. The heap check only catches
// the sessions pinning their bodies (the bound's sessions would hold
// bound × 2 MiB): its margin is half of that, which the allocations of
// tests running alongside do not reach.
func TestSessionFlood(t *testing.T) {
	srv := startServer(t, server.Config{})
	secret, _, err := srv.Store().CreateToken(testCtx(t, 10*time.Second), store.TokenSpec{UserID: "mallory", Scopes: []string{store.ScopeToolsList}})
	if err != nil {
		t.Fatal(err)
	}
	gw, ok := srv.Handler().(*gateway.Gateway)
	if !ok {
		t.Fatalf("the server's handler is %T", srv.Handler())
	}
	url := "http://" + srv.HTTPAddr().String() + gateway.MCPPath
	const n, bound = 200, gateway.DefaultMaxSessionsPerToken
	pad := strings.Repeat("p", 1<<20) // twice in each body
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var sids []string
	bodySize := 0
	for i := range n {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
			`"capabilities":{"sampling":{},"experimental":{"pad":%q}},"clientInfo":{"name":"flood","version":"%d","pad":%q}}}`, pad, i, pad)
		resp, b := rawPost(t, url, secret, body, nil)
		sid := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || sid == "" {
			t.Fatalf("initialize %d: %d %.300s", i, resp.StatusCode, b)
		}
		sids = append(sids, sid)
		bodySize = len(body)
	}
	after := heap()
	if got := gw.Stats().Sessions; got != bound {
		t.Errorf("%d live sessions after %d initializes, want the bound %d", got, n, bound)
	}
	if pinned := int64(bound * bodySize); int64(after)-int64(before) > pinned/2 {
		t.Errorf("heap grew by %d MiB over %d initializes: the live sessions pin their bodies (%d MiB)",
			(int64(after)-int64(before))>>20, n, pinned>>20)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	// sids[:n-bound] were evicted in order, and the marks of the last
	// bound evictions are kept: all of them here.
	for i, sid := range sids {
		resp, b := rawPost(t, url, secret, ping, map[string]string{"Mcp-Session-Id": sid})
		switch evicted := i < n-bound; {
		case evicted && (resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "-32600")):
			t.Fatalf("evicted session %d: %d %s, want 404 -32600", i, resp.StatusCode, b)
		case !evicted && resp.StatusCode != http.StatusOK:
			t.Fatalf("live session %d: %d %s, want 200", i, resp.StatusCode, b)
		}
	}
	if got := gw.Stats().Sessions; got != bound {
		t.Errorf("%d live sessions after the pings, want %d", got, bound)
	}
}
