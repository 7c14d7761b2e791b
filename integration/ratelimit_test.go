package integration

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// rawCall POSTs one stateless-era tools/call (2026-07-28 needs no session)
// and returns the status, Retry-After and body.
func rawCall(t *testing.T, e *gwEnv, token, tool string) answer {
	t.Helper()
	req, err := statelessCall(testCtx(t, 20*time.Second), e.mcpURL(), token, tool, "hi")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return answer{resp.StatusCode, resp.Header.Get("Retry-After"), []byte(b.String())}
}

type answer struct {
	status int
	retry  string
	body   []byte
}

// checkLimited asserts a 429 answer: Retry-After in whole seconds, a body
// that is both the plain error shape and a JSON-RPC error.
func checkLimited(t *testing.T, a answer) {
	t.Helper()
	status, retry, body := a.status, a.retry, a.body
	if status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429; body %s", status, body)
	}
	if s, err := strconv.Atoi(retry); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q, want 1..60 seconds", retry)
	}
	var v struct {
		JSONRPC string `json:"jsonrpc"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				RetryAfter int `json:"retryAfter"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.JSONRPC != "2.0" || v.Error.Code != -32029 || v.Error.Data.RetryAfter < 1 || v.Error.Message == "" {
		t.Fatalf("429 body %s (%v), want a JSON-RPC error -32029 with data.retryAfter and a message", body, err)
	}
}

// TestRateLimits: over a token's, a user's or the agent tools' limit a
// request gets 429 with a correct Retry-After; others are not held back;
// after the wait requests pass again.
func TestRateLimits(t *testing.T) {
	e := startGateway(t, server.Config{RateLimits: gateway.RateLimits{
		PerToken:   gateway.Limit{PerMinute: 60, Burst: 3},
		PerUser:    gateway.Limit{PerMinute: 60, Burst: 5},
		AgentTools: gateway.Limit{PerMinute: 60, Burst: 4},
	}})
	ok := func(t *testing.T, token, tool string) {
		t.Helper()
		if a := rawCall(t, e, token, tool); a.status != http.StatusOK {
			t.Fatalf("%s: status %d, body %s", tool, a.status, a.body)
		}
	}

	t.Run("token", func(t *testing.T) {
		a1 := e.token(t, store.TokenSpec{UserID: "ann"})
		for range 3 {
			ok(t, a1, "platform_echo")
		}
		checkLimited(t, rawCall(t, e, a1, "platform_echo"))
		// The user's other token still has room under the user limit.
		a2 := e.token(t, store.TokenSpec{UserID: "ann"})
		ok(t, a2, "platform_echo")
		ok(t, a2, "platform_echo")
		// Now the user's 5 are used: the second token is refused too.
		checkLimited(t, rawCall(t, e, a2, "platform_echo"))
		// Someone else is not held back.
		ok(t, e.token(t, store.TokenSpec{UserID: "bob"}), "platform_echo")

		// Recovery: at 60/min one request a second comes back.
		deadline := time.Now().Add(10 * time.Second)
		for {
			a := rawCall(t, e, a1, "platform_echo")
			if a.status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("still limited 10 s later")
			}
			s, _ := strconv.Atoi(a.retry)
			time.Sleep(time.Duration(s) * time.Second)
		}
	})

	t.Run("agent tools", func(t *testing.T) {
		// Separate users, so that only the agent-tools limit can refuse.
		var refused bool
		for i := range 6 {
			tok := e.token(t, store.TokenSpec{UserID: "u" + strconv.Itoa(i)})
			a := rawCall(t, e, tok, "echo")
			if a.status == http.StatusTooManyRequests {
				checkLimited(t, a)
				refused = true
				// Platform tools are not under this limit.
				ok(t, tok, "platform_echo")
				break
			}
			if a.status != http.StatusOK {
				t.Fatalf("echo: status %d, body %s", a.status, a.body)
			}
		}
		if !refused {
			t.Fatal("6 agent tool calls in a row under a burst of 4 were all served")
		}
	})

	t.Run("go-sdk client sees an error", func(t *testing.T) {
		tok := e.token(t, store.TokenSpec{UserID: "carol"})
		cs := e.connect(t, e.mcpURL(), tok, "2025-11-25", nil)
		var err error
		for range 8 { // initialize used some of the 3
			if _, err = cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "platform_echo", Arguments: map[string]any{"text": "x"}}); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "too many requests") {
			t.Fatalf("error %v, want a rate-limit error", err)
		}
	})
}

// TestRateLimitREST: the REST API answers a limited request with the plain
// error shape and Retry-After.
func TestRateLimitREST(t *testing.T) {
	e := startGateway(t, server.Config{RateLimits: gateway.RateLimits{PerToken: gateway.Limit{PerMinute: 1, Burst: 1}}})
	tok := e.token(t, store.TokenSpec{UserID: "dan"})
	get := func() (*http.Response, map[string]any) {
		req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, e.base+"/api/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp, v
	}
	if resp, _ := get(); resp.StatusCode != http.StatusOK {
		t.Fatalf("first whoami: %s", resp.Status)
	}
	resp, v := get()
	if resp.StatusCode != http.StatusTooManyRequests || v["error"] != "rate_limited" || v["message"] == "" {
		t.Fatalf("second whoami: %s %v, want 429 rate_limited", resp.Status, v)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q, want 1..60 (one request a minute)", resp.Header.Get("Retry-After"))
	}
}
