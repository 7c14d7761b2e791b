package platformtools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/store"
)

// Options configures a Registry. The zero value of each field but API is a
// usable default.
type Options struct {
	// API is the REST handler tools inject their requests into: the
	// gateway's router with its auth middleware, so that injected requests
	// pass the same checks as the caller's own. Required.
	API http.Handler
	// Timeout bounds one tool call when ctx has no earlier deadline;
	// 0 means 30s.
	Timeout time.Duration
	// MaxInjectResponse bounds the body of one injected response;
	// 0 means 8 MiB.
	MaxInjectResponse int64
	// InjectHost is the Host of injected requests; "" means "localhost".
	// The gateway's router may check Host (against DNS rebinding): give it
	// a host it serves.
	InjectHost string
	// CheckOutput validates the structuredContent of successful results
	// against the tool's output schema; a mismatch becomes an isError
	// result (and is logged). false (the default) skips it: it costs a
	// decode per call, and the tools are ours. Tests turn it on.
	CheckOutput bool
	// Logger gets the registry's logs (component "platformtools"); nil
	// discards them.
	Logger *logrus.Entry
}

// Registry holds the platform tools and runs them. Add tools before serving;
// Add, Tools, Lookup and Call are safe for concurrent use.
type Registry struct {
	opts    Options
	inj     injector
	log     *logrus.Entry
	printer *message.Printer

	mu   sync.Mutex                // serializes Add
	tabs atomic.Pointer[toolTable] // read without a lock by Call
}

// toolTable is an immutable snapshot of the registered tools: Add builds a
// new one, so the hot path reads with one atomic load.
type toolTable struct {
	byName map[string]*entry
	sorted []*entry
}

type entry struct {
	tool Tool
	in   *compiledSchema
	out  *compiledSchema // nil when the tool has no output schema
	json json.RawMessage // the MCP Tool object, encoded once
}

// NewRegistry returns an empty Registry. It panics if opts.API is nil: a
// registry whose tools cannot inject is a programming error.
func NewRegistry(opts Options) *Registry {
	if opts.API == nil {
		panic("platformtools: Options.API is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.MaxInjectResponse <= 0 {
		opts.MaxInjectResponse = 8 << 20
	}
	if opts.InjectHost == "" {
		opts.InjectHost = "localhost"
	}
	r := &Registry{
		opts:    opts,
		inj:     injector{api: opts.API, maxResp: opts.MaxInjectResponse, host: opts.InjectHost},
		log:     logutil.Component(opts.Logger, "platformtools"),
		printer: message.NewPrinter(language.English),
	}
	r.tabs.Store(&toolTable{byName: map[string]*entry{}})
	return r
}

// Add registers t. It fails (wrapping ErrInvalidTool) on a bad or duplicate
// name, a nil handler, a bad scope, or a schema that does not compile.
// The schemas are compiled here, once.
func (r *Registry) Add(t Tool) error {
	if !mcp.ValidName(t.Name) {
		return fmt.Errorf("%w: name %q must match ^[A-Za-z0-9_.-]{1,128}$", ErrInvalidTool, t.Name)
	}
	if t.Handler == nil {
		return fmt.Errorf("%w: %s: no handler", ErrInvalidTool, t.Name)
	}
	if t.Scope != "" {
		if err := store.ValidateScope(t.Scope); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidTool, t.Name, err)
		}
	}
	e := &entry{tool: t}
	in := t.InputSchema
	if len(bytes.TrimSpace(in)) == 0 {
		in = json.RawMessage(mcp.DefaultInputSchema)
	}
	var err error
	if e.in, err = compileSchema(t.Name, "input", in); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidTool, t.Name, err)
	}
	e.tool.InputSchema = e.in.raw
	if len(bytes.TrimSpace(t.OutputSchema)) > 0 {
		if e.out, err = compileSchema(t.Name, "output", t.OutputSchema); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidTool, t.Name, err)
		}
		e.tool.OutputSchema = e.out.raw
	} else {
		e.tool.OutputSchema = nil
	}
	if t.Annotations != nil {
		a := *t.Annotations // the registry's copy cannot change behind its back
		e.tool.Annotations = &a
	}
	if e.json, err = json.Marshal(e.tool); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidTool, t.Name, err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.tabs.Load()
	if _, dup := old.byName[t.Name]; dup {
		return fmt.Errorf("%w: %s: a tool with this name is already registered", ErrInvalidTool, t.Name)
	}
	next := &toolTable{byName: make(map[string]*entry, len(old.byName)+1), sorted: make([]*entry, 0, len(old.sorted)+1)}
	for k, v := range old.byName {
		next.byName[k] = v
	}
	next.byName[t.Name] = e
	next.sorted = append(append(next.sorted, old.sorted...), e)
	sort.Slice(next.sorted, func(i, j int) bool { return next.sorted[i].tool.Name < next.sorted[j].tool.Name })
	r.tabs.Store(next)
	return nil
}

// Tools returns every registered tool, sorted by name. The schemas are the
// registry's compacted copies: do not modify them.
func (r *Registry) Tools() []Tool {
	tab := r.tabs.Load()
	out := make([]Tool, len(tab.sorted))
	for i, e := range tab.sorted {
		out[i] = e.tool
	}
	return out
}

// Lookup returns the tool named name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	e, ok := r.tabs.Load().byName[name]
	if !ok {
		return Tool{}, false
	}
	return e.tool, true
}

// ListJSON returns the MCP Tool objects (encoded once, at Add) of the tools
// tok may see, sorted by name: ready for a tools/list result. Do not modify
// them.
func (r *Registry) ListJSON(tok store.Token) []json.RawMessage {
	tab := r.tabs.Load()
	out := make([]json.RawMessage, 0, len(tab.sorted))
	for _, e := range tab.sorted {
		if Visible(tok, e.tool) {
			out = append(out, e.json)
		}
	}
	return out
}

// Call runs one tools/call and returns the MCP CallToolResult as raw JSON,
// ready to place under "result".
//
// It returns an error only when the call must not run at all: the tool is
// unknown or hidden from the token (ErrUnknownTool: JSON-RPC -32602), or the
// token may not call it (ErrForbidden: see Authorize). Everything after that
// is a result: arguments that do not match the input schema give an isError
// result naming the fields and the rules (the handler does not run); a
// handler error gives an isError result with its text; a handler panic
// gives an isError result (and is logged with its stack).
//
// Call sets the unexported fields of call that Inject needs; call must not
// be shared with another Call.
func (r *Registry) Call(ctx context.Context, call *Call) (json.RawMessage, error) {
	e, ok := r.tabs.Load().byName[call.Name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTool, call.Name)
	}
	if err := Authorize(call.Token, e.tool, call.Entity()); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(call.Arguments)) == 0 || string(call.Arguments) == "null" {
		call.Arguments = json.RawMessage("{}")
	}
	if err := e.in.validate(call.Arguments, r.printer); err != nil {
		return r.encode(e, mcp.ErrorResult("%s: %v", call.Name, err))
	}
	call.inj = &r.inj

	if d, ok := ctx.Deadline(); !ok || time.Until(d) > r.opts.Timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.Timeout)
		defer cancel()
	}
	res := r.run(ctx, e, call)
	if r.opts.CheckOutput && e.out != nil && !res.IsError && res.StructuredContent != nil {
		res = r.checkOutput(e, res)
	}
	return r.encode(e, res)
}

// run calls the handler and turns its error or panic into an isError result.
func (r *Registry) run(ctx context.Context, e *entry, call *Call) (res *mcp.CallToolResult) {
	defer func() {
		if p := recover(); p != nil {
			r.log.WithFields(logrus.Fields{"tool": e.tool.Name, "panic": fmt.Sprint(p), "stack": string(debug.Stack())}).Error("platform tool panicked")
			res = mcp.ErrorResult("%s failed with an internal error; it has been logged. Try again later or report it to the platform operator.", e.tool.Name)
		}
	}()
	res, err := e.tool.Handler(ctx, call)
	switch {
	case err != nil:
		r.log.WithFields(logrus.Fields{"tool": e.tool.Name, "error": err.Error()}).Debug("platform tool failed")
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return mcp.ErrorResult("%s: timed out: %v. Try again, perhaps with a smaller request.", e.tool.Name, err)
		}
		return mcp.ErrorResult("%s: %v", e.tool.Name, err)
	case res == nil:
		return &mcp.CallToolResult{}
	}
	return res
}

func (r *Registry) checkOutput(e *entry, res *mcp.CallToolResult) *mcp.CallToolResult {
	raw, err := mcp.StructuredJSON(res.StructuredContent)
	if err == nil {
		err = e.out.validateOutput(raw, r.printer)
	}
	if err != nil {
		r.log.WithFields(logrus.Fields{"tool": e.tool.Name, "error": err.Error()}).Error("platform tool result does not match its output schema")
		return mcp.ErrorResult("%s produced a result that does not match its output schema: %v", e.tool.Name, err)
	}
	return res
}

// encode encodes res; a result that cannot be encoded becomes an isError
// result saying so.
func (r *Registry) encode(e *entry, res *mcp.CallToolResult) (json.RawMessage, error) {
	b, err := res.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		r.log.WithFields(logrus.Fields{"tool": e.tool.Name, "error": err.Error()}).Error("platform tool result cannot be encoded")
		b, err = mcp.ErrorResult("%s produced a result that cannot be encoded: %v", e.tool.Name, err).AppendJSON(b[:0])
		if err != nil {
			return nil, err // cannot happen: a text content always encodes
		}
	}
	return b, nil
}
