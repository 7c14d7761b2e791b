package platformtools_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

const echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`

func echoHandler(_ context.Context, c *platformtools.Call) (*mcp.CallToolResult, error) {
	var a struct {
		Text string `json:"text"`
	}
	if err := c.Bind(&a); err != nil {
		return nil, err
	}
	return mcp.TextResult(a.Text), nil
}

// BenchmarkRegistryCall measures Registry.Call, the platform side of every
// platform tools/call: lookup, authorization, argument validation, handler,
// result encoding.
//
//   - echo: {"text": string} validated against its schema, bound, echoed;
//   - noargs: a tool whose schema accepts any object (no decoding);
//   - whoami: the built-in platform_whoami, injected through a mux router
//     and a bearer middleware backed by the real store.Store (token cache hit);
//   - noargs-nodeadline: noargs with a ctx without deadline, which costs
//     Call a context.WithTimeout (Options.Timeout).
//
// The others run with a ctx whose deadline is within Options.Timeout, as a
// gateway request with its call deadline has (the handlers here never
// wait on it).
func BenchmarkRegistryCall(b *testing.B) {
	tok := fullToken()
	args := json.RawMessage(`{"text":"hello, world"}`)

	b.Run("echo", func(b *testing.B) {
		reg := platformtools.NewRegistry(platformtools.Options{API: echoAPI("x")})
		if err := reg.Add(platformtools.Tool{Tool: mcp.Tool{Name: "echo", InputSchema: json.RawMessage(echoSchema)}, Handler: echoHandler}); err != nil {
			b.Fatal(err)
		}
		c := plainContext("alice")
		ctx := callCtx(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Call(ctx, &platformtools.Call{Name: "echo", Arguments: args, Token: tok, Secret: "x", Context: c}); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("noargs", func(b *testing.B) {
		reg := platformtools.NewRegistry(platformtools.Options{API: echoAPI("x")})
		if err := reg.Add(platformtools.Tool{
			Tool: mcp.Tool{
				Name: "ping",
			},
			Handler: func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
				return mcp.TextResult("pong"), nil
			},
		}); err != nil {
			b.Fatal(err)
		}
		c := plainContext("alice")
		empty := json.RawMessage(`{}`)
		ctx := callCtx(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Call(ctx, &platformtools.Call{Name: "ping", Arguments: empty, Token: tok, Context: c}); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("noargs-nodeadline", func(b *testing.B) {
		reg := platformtools.NewRegistry(platformtools.Options{API: echoAPI("x")})
		if err := reg.Add(platformtools.Tool{
			Tool: mcp.Tool{
				Name: "ping",
			},
			Handler: func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
				return mcp.TextResult("pong"), nil
			},
		}); err != nil {
			b.Fatal(err)
		}
		c := plainContext("alice")
		empty := json.RawMessage(`{}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Call(context.Background(), &platformtools.Call{Name: "ping", Arguments: empty, Token: tok, Context: c}); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("whoami", func(b *testing.B) {
		s, err := store.Open(context.Background(), b.TempDir(), store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		secret, tok, err := s.CreateToken(context.Background(), store.TokenSpec{UserID: "alice"})
		if err != nil {
			b.Fatal(err)
		}
		reg := platformtools.NewRegistry(platformtools.Options{API: platformRouter(s, platformtools.NewAPI(platformtools.APIOptions{}))})
		if err := platformtools.Register(reg); err != nil {
			b.Fatal(err)
		}
		c := plainContext("alice")
		ctx := callCtx(b)
		b.ReportAllocs()
		for b.Loop() {
			raw, err := reg.Call(ctx, &platformtools.Call{Name: platformtools.ToolWhoami, Token: tok, Secret: secret, Context: c})
			if err != nil {
				b.Fatal(err)
			}
			if raw[len(raw)-2] == 'e' { // ...,"isError":true}
				b.Fatalf("isError: %s", raw)
			}
		}
	})
}

// callCtx is the ctx of the calls of one benchmark: a deadline within
// Options.Timeout, like a gateway request's.
func callCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	b.Cleanup(cancel)
	return ctx
}
