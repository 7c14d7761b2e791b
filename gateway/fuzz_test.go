package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

type handlerRef struct{ h http.Handler }

func (r *handlerRef) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.h.ServeHTTP(w, req) }

// newGateway builds a gateway over the real embedded broker and store, with
// the built-in platform tools and no expert agent online.
func newGateway(t testing.TB) (*gateway.Gateway, string) {
	t.Helper()
	// Nothing logs to t: a fuzz target may not call f.Log.
	env := testenv.StartBroker(t, testenv.WithLogLevel(logrus.PanicLevel))
	ctx := testenv.Context(t, 30*time.Second)
	rq := requester.New(env.Broker.Bus(), requester.Options{})
	if err := rq.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rq.Close(c)
	})
	ref := &handlerRef{}
	reg := platformtools.NewRegistry(platformtools.Options{API: ref})
	if err := platformtools.Register(reg); err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{
		Tokens: env.Store, Agents: rq, PlatformID: "gwfuzz", Platform: reg,
		API: platformtools.NewAPI(platformtools.APIOptions{}), AllowedHosts: gateway.LoopbackHosts,
	})
	if err != nil {
		t.Fatal(err)
	}
	ref.h = g
	t.Cleanup(g.Close)
	secret, _, err := env.Store.CreateToken(ctx, store.TokenSpec{UserID: "fuzzer"})
	if err != nil {
		t.Fatal(err)
	}
	return g, secret
}

// FuzzServeMCP sends arbitrary bodies and protocol headers to the endpoint:
// it must never panic, and every answer is one of the documented shapes.
func FuzzServeMCP(f *testing.F) {
	for _, s := range []struct{ body, version string }{
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`, ""},
		{`{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, "2026-07-28"},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"platform_whoami","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, "2026-07-28"},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"+/#"}}}`, "2025-06-18"},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{`{"jsonrpc":"2.0","id":1e999,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","id":2}`, ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", ""},
		{strings.Repeat("[", 10000), ""},
	} {
		f.Add(s.body, s.version)
	}
	g, secret := newGateway(f)
	f.Fuzz(func(t *testing.T, body, version string) {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/api/v1/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if version != "" && !strings.ContainsAny(version, "\r\n\x00") {
			req.Header.Set("MCP-Protocol-Version", version)
			if m := methodOf(body); m != "" && !strings.ContainsAny(m, "\r\n\x00") {
				req.Header.Set("Mcp-Method", m)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req.WithContext(ctx))
		switch rec.Code {
		case http.StatusOK, http.StatusAccepted, http.StatusBadRequest, http.StatusNotFound, http.StatusForbidden:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		out := rec.Body.Bytes()
		if rec.Code == http.StatusAccepted {
			if len(out) != 0 {
				t.Fatalf("202 with a body: %s", out)
			}
			return
		}
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			for _, line := range bytes.Split(out, []byte("\n")) {
				if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && !json.Valid(d) {
					t.Fatalf("SSE data is not JSON: %s", d)
				}
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("answer is not JSON (status %d): %s", rec.Code, out)
		}
	})
}

func methodOf(body string) string {
	var m struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal([]byte(body), &m)
	return m.Method
}
