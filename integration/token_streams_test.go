package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// A listening stream (the legacy GET stream, the 2026 subscriptions/listen
// stream) outlives the request that authenticated it: it must not outlive
// its token. Revoking the token through the server's store ends it at once,
// revoking it from another process on the same data directory (the CLI)
// within the token cache's TTL, and an expiring token's stream ends at its
// expiry.
func TestStreamsEndWithTheirToken(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, server.Config{DataDir: dir})
	gw := srv.Handler().(*gateway.Gateway)
	base := "http://" + srv.HTTPAddr().String()
	client := newHTTPClient(t)

	// cli is the store a `toolbus token revoke --data-dir` opens.
	cli, err := store.Open(testCtx(t, 10*time.Second), dir, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	send := func(t *testing.T, req *http.Request, token string) *http.Response {
		t.Helper()
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	// openGET opens a legacy session's GET stream.
	openGET := func(t *testing.T, ctx context.Context, token string) *http.Response {
		t.Helper()
		init, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/mcp", strings.NewReader(initBody))
		init.Header.Set("Content-Type", "application/json")
		init.Header.Set("Accept", "application/json, text/event-stream")
		r := send(t, init, token)
		io.Copy(io.Discard, r.Body)
		sid := r.Header.Get("Mcp-Session-Id")
		if r.StatusCode != http.StatusOK || sid == "" {
			t.Fatalf("initialize = %d, session %q", r.StatusCode, sid)
		}
		get, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/mcp", nil)
		get.Header.Set("Accept", "text/event-stream")
		get.Header.Set("Mcp-Session-Id", sid)
		return send(t, get, token)
	}
	// openListen opens a 2026 subscriptions/listen stream.
	openListen := func(t *testing.T, ctx context.Context, token string) *http.Response {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "subscriptions/listen")
		return send(t, req, token)
	}

	for _, stream := range []struct {
		name string
		open func(*testing.T, context.Context, string) *http.Response
	}{{"GET", openGET}, {"subscriptions/listen", openListen}} {
		for _, tc := range []struct {
			name  string
			ttl   time.Duration
			end   func(t *testing.T, id string) // nil: the token expires
			bound time.Duration
		}{
			{"revoked by the server's store", 0, func(t *testing.T, id string) {
				if err := srv.Store().RevokeToken(testCtx(t, 5*time.Second), id); err != nil {
					t.Fatal(err)
				}
			}, time.Second},
			{"revoked by another process", 0, func(t *testing.T, id string) {
				if err := cli.RevokeToken(testCtx(t, 5*time.Second), id); err != nil {
					t.Fatal(err)
				}
			}, 2*store.DefaultTokenCacheTTL + time.Second},
			{"expired", 3 * time.Second, nil, 5 * time.Second},
		} {
			t.Run(stream.name+"/"+tc.name, func(t *testing.T) {
				secret, tok, err := srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "sam", TTL: tc.ttl})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t.Cleanup(cancel)
				resp := stream.open(t, ctx, secret)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
					t.Fatalf("stream = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
				}
				poll(t, 10*time.Second, "the stream to be held", func() bool { return gw.ListeningStreams() == 1 })
				done := make(chan error, 1)
				go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
				start := time.Now()
				if tc.end != nil {
					tc.end(t, tok.ID)
				} else {
					start = tok.ExpiresAt
				}
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("stream ended with %v, want EOF", err)
					}
					t.Logf("ended %v after the token did", time.Since(start).Round(time.Millisecond))
				case <-time.After(time.Until(start.Add(tc.bound))):
					t.Fatalf("the stream outlived its token by %v", tc.bound)
				}
				poll(t, 10*time.Second, "no stream left", func() bool { return gw.ListeningStreams() == 0 })
			})
		}
	}
}
