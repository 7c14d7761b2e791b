package platformtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

func okHandler(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
	return mcp.TextResult("ok"), nil
}

func TestAddRejects(t *testing.T) {
	valid := platformtools.Tool{Tool: mcp.Tool{Name: "t"}, Handler: okHandler}
	with := func(f func(*platformtools.Tool)) platformtools.Tool { tl := valid; f(&tl); return tl }
	for _, tc := range []struct {
		name string
		tool platformtools.Tool
		want string // in the error
	}{
		{"empty name", with(func(t *platformtools.Tool) { t.Name = "" }), "name"},
		{"name with space", with(func(t *platformtools.Tool) { t.Name = "a b" }), "name"},
		{"name with slash", with(func(t *platformtools.Tool) { t.Name = "a/b" }), "name"},
		{"name with plus", with(func(t *platformtools.Tool) { t.Name = "a+b" }), "name"},
		{"non-ASCII name", with(func(t *platformtools.Tool) { t.Name = "café" }), "name"},
		{"name of 129 bytes", with(func(t *platformtools.Tool) { t.Name = strings.Repeat("a", 129) }), "name"},
		{"no handler", with(func(t *platformtools.Tool) { t.Handler = nil }), "no handler"},
		{"bad scope", with(func(t *platformtools.Tool) { t.Scope = "Billing" }), "scope"},
		{"input not JSON", with(func(t *platformtools.Tool) { t.InputSchema = json.RawMessage(`{"type":`) }), "input schema"},
		{"input not an object schema", with(func(t *platformtools.Tool) { t.InputSchema = json.RawMessage(`{"type":"array"}`) }), `"type": "object"`},
		{"input without type", with(func(t *platformtools.Tool) { t.InputSchema = json.RawMessage(`{"properties":{}}`) }), `"type": "object"`},
		{"input is true", with(func(t *platformtools.Tool) { t.InputSchema = json.RawMessage(`true`) }), `"type": "object"`},
		{"input bad keyword", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"nope"}}}`)
		}), "input schema"},
		{"input negative minLength", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","minLength":-1}}}`)
		}), "input schema"},
		{"input bad regexp", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`)
		}), "input schema"},
		{"input external file ref", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`)
		}), "external references are not allowed"},
		{"input external http ref", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`)
		}), "external references are not allowed"},
		{"input relative ref", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"other.json"}}}`)
		}), "external references are not allowed"},
		{"input dangling local ref", with(func(t *platformtools.Tool) {
			t.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`)
		}), "input schema"},
		{"output not an object schema", with(func(t *platformtools.Tool) { t.OutputSchema = json.RawMessage(`{"type":"string"}`) }), "output schema"},
		{"output bad keyword", with(func(t *platformtools.Tool) {
			t.OutputSchema = json.RawMessage(`{"type":"object","required":"x"}`)
		}), "output schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newRegistry(t, nil, nil)
			err := reg.Add(tc.tool)
			if !errors.Is(err, platformtools.ErrInvalidTool) {
				t.Fatalf("Add: err = %v, want ErrInvalidTool", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Add: err = %q, want it to mention %q", err, tc.want)
			}
			if len(reg.Tools()) != 0 {
				t.Errorf("a refused tool was registered")
			}
		})
	}
}

func TestAddDuplicate(t *testing.T) {
	reg := newRegistry(t, nil, nil)
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "dup"}, Handler: okHandler})
	err := reg.Add(platformtools.Tool{Tool: mcp.Tool{Name: "dup", Description: "second"}, Handler: okHandler})
	if !errors.Is(err, platformtools.ErrInvalidTool) || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("second Add: err = %v, want ErrInvalidTool (already registered)", err)
	}
	if tl, _ := reg.Lookup("dup"); tl.Description != "" {
		t.Errorf("the duplicate replaced the first tool")
	}
}

func TestAddAcceptsNamesAndSchemas(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
	}{
		{"a", ""},
		{strings.Repeat("x", 128), `{"type":"object"}`},
		{"Mixed.Case_name-9", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`},
		{"draft7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"integer"}}}`},
		{"localref", `{"type":"object","$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`},
	} {
		t.Run(tc.name[:min(len(tc.name), 20)], func(t *testing.T) {
			reg := newRegistry(t, nil, nil)
			mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: tc.name, InputSchema: json.RawMessage(tc.input)}, Handler: okHandler})
			if _, ok := reg.Lookup(tc.name); !ok {
				t.Fatalf("Lookup(%q) after Add: not found", tc.name)
			}
		})
	}
}

func TestToolsSortedAndLookup(t *testing.T) {
	reg := newRegistry(t, nil, nil)
	for _, n := range []string{"zeta", "alpha", "Mid", "beta"} {
		mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: n}, Handler: okHandler})
	}
	var names []string
	for _, tl := range reg.Tools() {
		names = append(names, tl.Name)
	}
	if got, want := strings.Join(names, ","), "Mid,alpha,beta,zeta"; got != want {
		t.Errorf("Tools() names = %s, want %s", got, want)
	}
	if _, ok := reg.Lookup("gamma"); ok {
		t.Errorf("Lookup(gamma) found a tool that was never added")
	}
	tl, ok := reg.Lookup("alpha")
	if !ok || string(tl.InputSchema) != `{"type":"object"}` {
		t.Errorf("Lookup(alpha) = %+v, %v; want the default input schema filled in", tl, ok)
	}
}

func TestToolJSONShape(t *testing.T) {
	reg := newRegistry(t, nil, nil)
	mustAdd(t, reg, platformtools.Tool{
		Tool: mcp.Tool{
			Name:         "echo",
			Title:        "Echo",
			Description:  "Says it back.",
			InputSchema:  json.RawMessage("{\n  \"type\": \"object\",\n  \"properties\": {\"text\": {\"type\": \"string\"}}\n}"),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			Annotations:  &mcp.ToolAnnotations{Title: "Echo", ReadOnlyHint: new(true), OpenWorldHint: new(false)},
		},
		Scope:   "echo.use",
		Handler: okHandler,
	})
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "bare"}, Handler: okHandler})

	want := map[string]string{
		"echo": `{"name":"echo","title":"Echo","description":"Says it back.",` +
			`"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}},` +
			`"outputSchema":{"type":"object","properties":{"text":{"type":"string"}}},` +
			`"annotations":{"title":"Echo","readOnlyHint":true,"openWorldHint":false}}`,
		"bare": `{"name":"bare","inputSchema":{"type":"object"}}`,
	}
	for name, w := range want {
		tl, _ := reg.Lookup(name)
		got, err := json.Marshal(tl)
		if err != nil {
			t.Fatalf("Marshal(%s): %v", name, err)
		}
		if string(got) != w {
			t.Errorf("Marshal(%s) =\n%s\nwant\n%s", name, got, w)
		}
	}

	for _, tc := range []struct {
		name   string
		scopes []string
		want   []string
	}{
		{"default scopes hide the scoped tool", store.DefaultScopes, []string{"bare"}},
		{"tool scope shows it", []string{store.ScopeToolsList, "echo.use"}, []string{"bare", "echo"}},
		{"no tools:list shows nothing", []string{store.ScopeToolsCall, "echo.use"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := reg.ListJSON(store.Token{Scopes: tc.scopes})
			var got []string
			for _, raw := range list {
				var m struct{ Name string }
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				if string(raw) != want[m.Name] {
					t.Errorf("ListJSON item %s = %s, want %s", m.Name, raw, want[m.Name])
				}
				got = append(got, m.Name)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ListJSON names = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVisible(t *testing.T) {
	plain := platformtools.Tool{Tool: mcp.Tool{Name: "p"}}
	scoped := platformtools.Tool{Tool: mcp.Tool{Name: "s"}, Scope: "billing.read"}
	for _, tc := range []struct {
		name   string
		scopes []string
		tool   platformtools.Tool
		want   bool
	}{
		{"tools:list sees a plain tool", []string{store.ScopeToolsList}, plain, true},
		{"tools:call alone sees nothing", []string{store.ScopeToolsCall}, plain, false},
		{"admin alone sees nothing", []string{store.ScopeAdmin}, plain, false},
		{"no scopes", nil, plain, false},
		{"scoped tool needs its scope", []string{store.ScopeToolsList, store.ScopeToolsCall}, scoped, false},
		{"scoped tool with its scope", []string{store.ScopeToolsList, "billing.read"}, scoped, true},
		{"tool scope without tools:list", []string{"billing.read"}, scoped, false},
		{"similar scope is not the scope", []string{store.ScopeToolsList, "billing.read.all"}, scoped, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := platformtools.Visible(store.Token{Scopes: tc.scopes}, tc.tool); got != tc.want {
				t.Errorf("Visible = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCallAuthorization(t *testing.T) {
	var ran atomic.Int32
	h := func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
		ran.Add(1)
		return mcp.TextResult("ran"), nil
	}
	reg := newRegistry(t, nil, nil)
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "write", Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)}}, Handler: h})
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "read", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: new(true)}}, Handler: h})
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "readfalse", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: new(false)}}, Handler: h})
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "billing", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: new(true)}}, Handler: h, Scope: "billing.read"})

	def := store.DefaultScopes
	ent := store.Entity{Type: "project", ID: "p1"}
	for _, tc := range []struct {
		name   string
		tool   string
		tok    store.Token
		entity store.Entity
		want   error // nil: the handler runs
	}{
		{"unknown tool", "nope", store.Token{Scopes: def}, store.PlainEntity, platformtools.ErrUnknownTool},
		{"default token calls a write tool", "write", store.Token{Scopes: def}, store.PlainEntity, nil},
		{"no tools:call", "read", store.Token{Scopes: []string{store.ScopeToolsList}}, store.PlainEntity, platformtools.ErrForbidden},
		{"tools:call without tools:list may call", "read", store.Token{Scopes: []string{store.ScopeToolsCall}}, store.PlainEntity, nil},
		{"read-only token, write tool", "write", store.Token{Scopes: def, ReadOnly: true}, store.PlainEntity, platformtools.ErrForbidden},
		{"read-only token, readOnlyHint false", "readfalse", store.Token{Scopes: def, ReadOnly: true}, store.PlainEntity, platformtools.ErrForbidden},
		{"read-only token, read tool", "read", store.Token{Scopes: def, ReadOnly: true}, store.PlainEntity, nil},
		{"missing tool scope hides the tool", "billing", store.Token{Scopes: def}, store.PlainEntity, platformtools.ErrUnknownTool},
		{"tool scope", "billing", store.Token{Scopes: append([]string{"billing.read"}, def...)}, store.PlainEntity, nil},
		{"narrowed token, its entity", "read", store.Token{Scopes: def, Entities: []store.Entity{ent}}, ent, nil},
		{"narrowed token, other entity", "read", store.Token{Scopes: def, Entities: []store.Entity{ent}}, store.Entity{Type: "project", ID: "p2"}, platformtools.ErrForbidden},
		{"narrowed token, plain endpoint", "read", store.Token{Scopes: def, Entities: []store.Entity{ent}}, store.PlainEntity, platformtools.ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ran.Load()
			c := plainContext("alice")
			c.EntityType, c.EntityID = tc.entity.Type, tc.entity.ID
			raw, err := reg.Call(testCtx(t), &platformtools.Call{Name: tc.tool, Token: tc.tok, Context: c})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				if ran.Load() != before+1 {
					t.Errorf("handler did not run; result %s", raw)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Call: err = %v, want %v", err, tc.want)
			}
			if raw != nil {
				t.Errorf("Call refused with a result too: %s", raw)
			}
			if ran.Load() != before {
				t.Errorf("handler ran for a refused call")
			}
		})
	}
}

const countSchema = `{
	"type": "object",
	"properties": {
		"text":  {"type": "string", "minLength": 1},
		"count": {"type": "integer", "minimum": 1, "maximum": 10},
		"when":  {"type": "string", "format": "date-time"},
		"mode":  {"enum": ["fast", "slow"]},
		"opts":  {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"], "additionalProperties": false},
		"tags":  {"type": "array", "items": {"type": "string"}, "maxItems": 2}
	},
	"required": ["text"],
	"additionalProperties": false
}`

func TestCallValidation(t *testing.T) {
	var ran atomic.Int32
	reg := newRegistry(t, nil, nil)
	mustAdd(t, reg, platformtools.Tool{
		Tool: mcp.Tool{
			Name:        "count",
			InputSchema: json.RawMessage(countSchema),
		},
		Handler: func(_ context.Context, c *platformtools.Call) (*mcp.CallToolResult, error) {
			ran.Add(1)
			return mcp.TextResult(string(c.Arguments)), nil
		},
	})
	mustAdd(t, reg, platformtools.Tool{
		Tool: mcp.Tool{
			Name: "any",
		},
		Handler: func(_ context.Context, c *platformtools.Call) (*mcp.CallToolResult, error) {
			ran.Add(1)
			return mcp.TextResult(string(c.Arguments)), nil
		},
	})

	for _, tc := range []struct {
		name, tool, args string
		want             []string // in the isError text; nil: valid
	}{
		{"valid", "count", `{"text":"hi","count":3,"when":"2025-01-02T03:04:05Z","mode":"fast","opts":{"limit":1},"tags":["a"]}`, nil},
		{"integer written as 3.0", "count", `{"text":"hi","count":3.0}`, nil},
		{"missing required", "count", `{"count":3}`, []string{`missing required argument "text"`, `rule "required"`}},
		{"wrong type", "count", `{"text":"hi","count":"3"}`, []string{`argument "count"`, "want integer", `rule "type"`}},
		{"not an integer", "count", `{"text":"hi","count":2.5}`, []string{`argument "count"`, `rule "type"`}},
		{"above maximum", "count", `{"text":"hi","count":11}`, []string{`argument "count"`, `rule "maximum"`}},
		{"too short", "count", `{"text":""}`, []string{`argument "text"`, `rule "minLength"`}},
		{"bad format", "count", `{"text":"hi","when":"yesterday"}`, []string{`argument "when"`, `rule "format"`}},
		{"not in enum", "count", `{"text":"hi","mode":"medium"}`, []string{`argument "mode"`, `rule "enum"`}},
		{"unknown argument", "count", `{"text":"hi","colour":"red"}`, []string{`unknown argument "colour"`, `rule "additionalProperties"`}},
		{"nested missing", "count", `{"text":"hi","opts":{}}`, []string{`missing required argument "opts.limit"`}},
		{"nested wrong type", "count", `{"text":"hi","opts":{"limit":"x"}}`, []string{`argument "opts.limit"`, `rule "type"`}},
		{"nested unknown", "count", `{"text":"hi","opts":{"limit":1,"x":1}}`, []string{`unknown argument "opts.x"`}},
		{"array item", "count", `{"text":"hi","tags":["a",1]}`, []string{`argument "tags.1"`, `rule "type"`}},
		{"several problems", "count", `{"count":"x","mode":1}`, []string{`missing required argument "text"`, `argument "count"`, `argument "mode"`}},
		{"array arguments", "count", `[1,2]`, []string{"arguments must be a JSON object"}},
		{"string arguments", "any", `"x"`, []string{"arguments must be a JSON object"}},
		{"number arguments", "any", `42`, []string{"arguments must be a JSON object"}},
		{"broken JSON", "count", `{"text":`, []string{"not valid JSON"}},
		{"broken JSON, any schema", "any", `{"text":`, []string{"arguments must be a JSON object"}},
		{"trailing data", "count", `{"text":"hi"} {}`, []string{"not valid JSON"}},
		{"huge number", "count", `{"text":"hi","count":1e1000000}`, []string{`argument "count"`, "number out of range"}},
		{"huge negative exponent", "count", `{"text":"hi","count":1E-999999}`, []string{`argument "count"`, "number out of range"}},
		{"exponent overflow", "count", `{"text":"hi","count":1e99999999999999999999}`, []string{`argument "count"`, "number out of range"}},
		{"large but fine exponent", "count", `{"text":"hi","count":1e1}`, nil},
		{"huge number in array", "count", `{"text":"hi","tags":[` + strings.Repeat("9", 100) + `]}`, []string{`argument "tags.0"`, "number out of range"}},
		{"absent arguments, any schema", "any", ``, nil},
		{"null arguments, any schema", "any", `null`, nil},
		{"absent arguments, required field", "count", ``, []string{`missing required argument "text"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ran.Load()
			res := callTool(t, reg, &platformtools.Call{Name: tc.tool, Arguments: json.RawMessage(tc.args), Token: fullToken(), Context: plainContext("alice")})
			if tc.want == nil {
				if res.IsError {
					t.Fatalf("valid arguments refused: %s", res.text())
				}
				if ran.Load() != before+1 {
					t.Errorf("handler did not run")
				}
				return
			}
			if !res.IsError {
				t.Fatalf("invalid arguments accepted: result %q", res.text())
			}
			if ran.Load() != before {
				t.Errorf("handler ran on invalid arguments")
			}
			txt := res.text()
			if !strings.HasPrefix(txt, tc.tool+": ") {
				t.Errorf("error text %q does not start with the tool name", txt)
			}
			for _, w := range tc.want {
				if !strings.Contains(txt, w) {
					t.Errorf("error text %q lacks %q", txt, w)
				}
			}
		})
	}
}

func TestCallValidationListsAtMostFive(t *testing.T) {
	props := map[string]any{}
	var args []string
	for i := range 8 {
		props[fmt.Sprintf("f%d", i)] = map[string]string{"type": "integer"}
		args = append(args, fmt.Sprintf(`"f%d":"x"`, i))
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	reg := newRegistry(t, nil, nil)
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "many", InputSchema: schema}, Handler: okHandler})
	res := callTool(t, reg, &platformtools.Call{Name: "many", Arguments: json.RawMessage("{" + strings.Join(args, ",") + "}"), Token: fullToken()})
	if !res.IsError || !strings.Contains(res.text(), "and 3 more") || strings.Count(res.text(), `rule "type"`) != 5 {
		t.Errorf("result %q: want 5 problems listed and \"and 3 more\"", res.text())
	}
}

func TestCallHandlerOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        platformtools.Handler
		wantErr  bool
		wantText string
		wantSC   string
		wantLog  logrus.Level // 0: nothing at Error level expected
	}{
		{"text", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return mcp.TextResult("hello"), nil
		}, false, "hello", "", 0},
		{"json", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return mcp.JSONResult(map[string]int{"n": 1}), nil
		}, false, `{"n":1}`, `{"n":1}`, 0},
		{"tool result error", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return mcp.ErrorResult("no such project %q; list them with platform_projects", "x"), nil
		}, true, `no such project "x"; list them with platform_projects`, "", 0},
		{"handler error", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return nil, errors.New("the database is down; try again in a minute")
		}, true, "t: the database is down; try again in a minute", "", 0},
		{"handler panic", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			panic("boom")
		}, true, "t failed with an internal error", "", logrus.ErrorLevel},
		{"nil result", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return nil, nil
		}, false, "", "", 0},
		{"structured not an object", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: []int{1}}, nil
		}, true, "cannot be encoded", "", logrus.ErrorLevel},
		{"structured not encodable", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"c": make(chan int)}}, nil
		}, true, "cannot be encoded", "", logrus.ErrorLevel},
		{"content without type", func(context.Context, *platformtools.Call) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{{Text: "x"}}}, nil
		}, true, "cannot be encoded", "", logrus.ErrorLevel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg, hook := logtest.NewNullLogger()
			reg := newRegistry(t, nil, func(o *platformtools.Options) { o.Logger = logrus.NewEntry(lg) })
			mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "t"}, Handler: tc.h})
			res := callTool(t, reg, &platformtools.Call{Name: "t", Token: fullToken()})
			if res.IsError != tc.wantErr {
				t.Errorf("isError = %v, want %v (text %q)", res.IsError, tc.wantErr, res.text())
			}
			if !strings.Contains(res.text(), tc.wantText) {
				t.Errorf("text = %q, want it to contain %q", res.text(), tc.wantText)
			}
			if tc.wantSC != "" && string(res.StructuredContent) != tc.wantSC {
				t.Errorf("structuredContent = %s, want %s", res.StructuredContent, tc.wantSC)
			}
			var logged bool
			for _, e := range hook.AllEntries() {
				if e.Level <= logrus.ErrorLevel {
					logged = true
					if e.Data["component"] != "platformtools" || e.Data["tool"] != "t" {
						t.Errorf("log entry %v lacks component/tool fields", e.Data)
					}
				}
			}
			if logged != (tc.wantLog != 0) {
				t.Errorf("logged at error level = %v, want %v", logged, tc.wantLog != 0)
			}
			if tc.name == "handler panic" && (len(hook.AllEntries()) == 0 || hook.LastEntry().Data["stack"] == "") {
				t.Errorf("panic logged without a stack")
			}
		})
	}
}

func TestCallTimeout(t *testing.T) {
	reg := newRegistry(t, nil, func(o *platformtools.Options) { o.Timeout = 50 * time.Millisecond })
	mustAdd(t, reg, platformtools.Tool{
		Tool: mcp.Tool{
			Name: "slow",
		},
		Handler: func(ctx context.Context, _ *platformtools.Call) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, fmt.Errorf("waiting: %w", ctx.Err())
		},
	})
	res := callTool(t, reg, &platformtools.Call{Name: "slow", Token: fullToken()})
	if !res.IsError || !strings.Contains(res.text(), "timed out") {
		t.Errorf("result %+v: want an isError result saying it timed out", res)
	}

	// A caller's earlier deadline is kept.
	reg = newRegistry(t, nil, func(o *platformtools.Options) { o.Timeout = time.Hour })
	var got time.Time
	mustAdd(t, reg, platformtools.Tool{
		Tool: mcp.Tool{
			Name: "dl",
		},
		Handler: func(ctx context.Context, _ *platformtools.Call) (*mcp.CallToolResult, error) {
			got, _ = ctx.Deadline()
			return nil, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	if _, err := reg.Call(ctx, &platformtools.Call{Name: "dl", Token: fullToken()}); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Errorf("handler deadline %v, want the caller's %v", got, want)
	}
}

func TestCheckOutput(t *testing.T) {
	tool := platformtools.Tool{
		Tool: mcp.Tool{
			Name:         "out",
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		},
		Handler: func(_ context.Context, c *platformtools.Call) (*mcp.CallToolResult, error) {
			var a struct{ N any }
			if err := c.Bind(&a); err != nil {
				return nil, err
			}
			return mcp.JSONResult(map[string]any{"n": a.N}), nil
		},
	}
	for _, tc := range []struct {
		name    string
		check   bool
		args    string
		wantErr bool
	}{
		{"conforming", true, `{"N":1}`, false},
		{"not conforming, checked", true, `{"N":"x"}`, true},
		{"not conforming, unchecked", false, `{"N":"x"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newRegistry(t, nil, func(o *platformtools.Options) { o.CheckOutput = tc.check })
			mustAdd(t, reg, tool)
			res := callTool(t, reg, &platformtools.Call{Name: "out", Arguments: json.RawMessage(tc.args), Token: fullToken()})
			if res.IsError != tc.wantErr {
				t.Errorf("isError = %v, want %v: %s", res.IsError, tc.wantErr, res.text())
			}
			if tc.wantErr && !strings.Contains(res.text(), `field "n"`) {
				t.Errorf("text %q does not name the field", res.text())
			}
		})
	}
}

func TestBind(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		wantErr    bool
	}{
		{"fields", `{"text":"a","n":2}`, false},
		{"empty", ``, false},
		{"unknown field", `{"text":"a","x":1}`, true},
		{"wrong type", `{"n":"2"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v struct {
				Text string `json:"text"`
				N    int    `json:"n"`
			}
			err := (&platformtools.Call{Arguments: json.RawMessage(tc.args)}).Bind(&v)
			if (err != nil) != tc.wantErr {
				t.Errorf("Bind(%s) err = %v, want error %v", tc.args, err, tc.wantErr)
			}
		})
	}
}

// TestConcurrentAddAndCall runs Add beside Call, Tools, Lookup and ListJSON
// (for the race detector).
func TestConcurrentAddAndCall(t *testing.T) {
	reg := newRegistry(t, nil, nil)
	mustAdd(t, reg, platformtools.Tool{Tool: mcp.Tool{Name: "base", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}}}`)}, Handler: okHandler})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if g == 0 {
					if err := reg.Add(platformtools.Tool{Tool: mcp.Tool{Name: fmt.Sprintf("t%d", i)}, Handler: okHandler}); err != nil {
						t.Errorf("Add: %v", err)
					}
					continue
				}
				if _, err := reg.Call(ctx, &platformtools.Call{Name: "base", Arguments: json.RawMessage(`{"a":1}`), Token: fullToken()}); err != nil {
					t.Errorf("Call: %v", err)
				}
				_ = reg.Tools()
				_, _ = reg.Lookup("t1")
				_ = reg.ListJSON(fullToken())
			}
		})
	}
	wg.Wait()
	if n := len(reg.Tools()); n != 51 {
		t.Errorf("%d tools after the run, want 51", n)
	}
}

func TestNewRegistryNeedsAPI(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("NewRegistry without API did not panic")
		}
	}()
	platformtools.NewRegistry(platformtools.Options{})
}
