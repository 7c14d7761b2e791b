package platformtools_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/platformtools"
)

// FuzzCallArguments feeds arbitrary arguments to a tool with a demanding
// schema: Call never panics, never returns an error for a known tool, and
// always returns a valid CallToolResult.
func FuzzCallArguments(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"text":"hi"}`, `{"text":"hi","count":3}`, `{"count":1e1000000}`,
		`{"opts":{"limit":"x"}}`, `{"tags":[1,2,3]}`, `{"text":"hi"} x`, `{"when":"2025-13-01T00:00:00Z"}`, "{\"text\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	reg := platformtools.NewRegistry(platformtools.Options{API: http.NotFoundHandler(), CheckOutput: true})
	if err := reg.Add(platformtools.Tool{
		Tool: mcp.Tool{
			Name:        "count",
			InputSchema: json.RawMessage(countSchema),
		},
		Handler: func(_ context.Context, c *platformtools.Call) (*mcp.CallToolResult, error) {
			var a map[string]any
			if err := c.Bind(&a); err != nil {
				return nil, err
			}
			return mcp.JSONResult(a), nil
		},
	}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := reg.Call(ctx, &platformtools.Call{Name: "count", Arguments: args, Token: fullToken(), Context: plainContext("alice")})
		if err != nil {
			t.Fatalf("Call(%q): %v", args, err)
		}
		var res struct {
			Content []json.RawMessage `json:"content"`
			IsError bool              `json:"isError"`
		}
		if err := json.Unmarshal(raw, &res); err != nil || res.Content == nil {
			t.Fatalf("Call(%q) = %s: not a CallToolResult (%v)", args, raw, err)
		}
	})
}
