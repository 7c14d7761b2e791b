package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/store"
)

// Bounds of a Try it call.
const (
	// tryTimeout bounds a Try it call from the mint of its token to the
	// answer, beyond the gateway's own call timeout (--call-timeout, 30 s
	// by default), which normally answers first.
	tryTimeout = 2 * time.Minute
	// tryTokenTTL is the life of the token minted for a call, revoked as
	// soon as the call ends: it outlives tryTimeout.
	tryTokenTTL = "5m"
	// tryMaxEvents bounds the progress and log lines a call's page shows;
	// the rest are counted.
	tryMaxEvents = 500
	// tryMaxFields bounds the fields generated from a schema; past it the
	// raw JSON arguments are the only way in.
	tryMaxFields = 100
)

// tryField is one input of the form generated from a tool's input schema.
type tryField struct {
	ID   string // the input's id: "arg-N"
	Name string // the property's name (the form field is "arg:" + Name)
	// Input is how it is entered: text, number, integer, checkbox,
	// select (an enum of strings) or json (anything else).
	Input       string
	Type        string // the schema's type, as shown
	Required    bool
	Description string
	Enum        []string
	Value       string // the value sent last
	Checked     bool
}

// FormName is the field's name in the form.
func (f tryField) FormName() string { return "arg:" + f.Name }

// tryData is the Try it page.
type tryData struct {
	Pick   toolsPick
	Caller *toolsCaller
	Tool   *toolsRow
	Fields []tryField
	// FieldsNote says why the form has fewer fields than the schema.
	FieldsNote string
	Raw        string // the raw JSON arguments, kept
	// Run is set on the answer of a call (POST): the page streams.
	Run *tryRun
}

// tryRun is the heading of a call's answer.
type tryRun struct {
	Tool, Caller, TokenID string
	Arguments             string // sent, indented
}

// tryEvent is a message the gateway sent ahead of the answer.
type tryEvent struct {
	Kind string // progress, log, other
	// Progress: "3" or "3 of 10"; Message its message.
	Progress, Message string
	// Log: its level, logger and data (text, or indented JSON).
	Level, Logger, Data string
	Method              string // other
}

// tryResult is the answer of a call.
type tryResult struct {
	// Error is the JSON-RPC error, or why there was no answer.
	Error, ErrorData string
	IsError          bool
	Content          []tryContent
	Structured       string
	Elapsed          string
	Events, Dropped  int
}

type tryContent struct {
	Type, Text, JSON string
}

// Markers of the answer page: the events go where the first is, the
// result where the second is. They are literal text of try.html, which
// html/template writes as it is; no escaped value can contain "<".
const (
	tryMarkEvents = `<span id="try-mark-events"></span>`
	tryMarkResult = `<span id="try-mark-result"></span>`
)

// tryPage is the Try it page: the caller, the tool, and its form.
func (c *Console) tryPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.tryShow(w, r, ss, r.URL.Query(), nil)
}

// tryShow renders the Try it page for the choice in q; form holds the
// values sent last (nil: none).
func (c *Console) tryShow(w http.ResponseWriter, r *http.Request, ss *session, q url.Values, form url.Values) {
	d, status, msg, err := c.tryPrepare(r, ss, q, form)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	c.render(w, status, "try", pageData{Title: "Try it", Nav: "try", User: ss.user, Message: msg, Page: d})
}

// tryPrepare resolves the caller and the tool of q and builds the form.
func (c *Console) tryPrepare(r *http.Request, ss *session, q url.Values, form url.Values) (tryData, int, string, error) {
	k, pick, status, msg, err := c.toolsResolve(r.Context(), ss, q, Path+"try")
	d := tryData{Pick: pick, Caller: k}
	if err != nil {
		return d, 0, "", err
	}
	if c.opts.ServeAs == nil || c.opts.MCP == nil {
		return d, http.StatusServiceUnavailable, "This server has no MCP gateway to call: Try it is not available.", nil
	}
	if k == nil {
		return d, status, msg, nil
	}
	listed, _, err := c.toolsSeenBy(r.Context(), r, k.Tok)
	if err != nil {
		return d, http.StatusBadGateway, "The gateway did not list the tools for " + k.Describe() + ": " + err.Error(), nil
	}
	var tool *listedTool
	for i, t := range listed {
		d.Pick.Tools = append(d.Pick.Tools, t.Name)
		if t.Name == pick.Tool {
			tool = &listed[i]
		}
	}
	if pick.Tool == "" {
		return d, http.StatusOK, "", nil
	}
	if tool == nil {
		return d, http.StatusNotFound, "The tool " + strconv.Quote(clip.Marked(pick.Tool, 128)) + " is not among the tools " + k.Describe() +
			" sees (the Tools page says why a tool is not visible).", nil
	}
	d.Tool = &toolsRow{Name: tool.Name, Title: tool.title(), Description: tool.Description, Agent: tool.agent(), ReadOnly: tool.readOnly(), Schema: indentJSON(tool.InputSchema)}
	d.Fields, d.FieldsNote = schemaFields(tool.InputSchema)
	if form != nil {
		d.Raw = form.Get("raw")
		for i := range d.Fields {
			f := &d.Fields[i]
			f.Value = form.Get(f.FormName())
			f.Checked = f.Value != ""
		}
	}
	return d, http.StatusOK, "", nil
}

// schemaFields turns an object schema's properties, in their order, into
// form fields; the note says what the form leaves to the raw JSON.
func schemaFields(schema json.RawMessage) ([]tryField, string) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil, "The input schema could not be read: give the arguments as raw JSON."
	}
	names, raws := orderedMembers(s.Properties)
	var out []tryField
	note := ""
	for i, name := range names {
		if i == tryMaxFields {
			note = "The schema has " + strconv.Itoa(len(names)) + " properties; the form shows the first " + strconv.Itoa(tryMaxFields) + ": give the others as raw JSON."
			break
		}
		var p struct {
			Type        json.RawMessage   `json:"type"`
			Enum        []json.RawMessage `json:"enum"`
			Description string            `json:"description"`
		}
		_ = json.Unmarshal(raws[i], &p)
		f := tryField{ID: "arg-" + strconv.Itoa(i), Name: name, Required: slices.Contains(s.Required, name), Description: p.Description}
		typ := schemaType(p.Type)
		f.Type = typ
		switch typ {
		case "string", "":
			f.Input = "text"
			if len(p.Enum) > 0 {
				f.Input = "select"
				for _, e := range p.Enum {
					var v string
					if json.Unmarshal(e, &v) != nil {
						f.Input, f.Enum = "json", nil
						break
					}
					f.Enum = append(f.Enum, v)
				}
			} else if typ == "" {
				f.Input = "json"
			}
		case "number", "integer":
			f.Input = typ
		case "boolean":
			f.Input = "checkbox"
		default:
			f.Input = "json"
		}
		if f.Type == "" {
			f.Type = "any"
		}
		out = append(out, f)
	}
	return out, note
}

// schemaType is a property's single type ("" when it has none or several
// besides "null").
func schemaType(raw json.RawMessage) string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return ""
	}
	many = slices.DeleteFunc(many, func(s string) bool { return s == "null" })
	if len(many) == 1 {
		return many[0]
	}
	return ""
}

// orderedMembers are the members of a JSON object in their order.
func orderedMembers(raw json.RawMessage) ([]string, []json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil
	}
	var names []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return names, vals
		}
		name, _ := t.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return names, vals
		}
		if slices.Contains(names, name) {
			continue
		}
		names, vals = append(names, name), append(vals, v)
	}
	return names, vals
}

// tryArguments builds the call's arguments from the form: the raw JSON
// when given (an object), else each field by its type. An empty optional
// field is left out; an unchecked box is false if required, else left out.
func tryArguments(fields []tryField, form url.Values) (json.RawMessage, error) {
	if raw := strings.TrimSpace(form.Get("raw")); raw != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
			return nil, errors.New("The raw JSON arguments are not a JSON object.")
		}
		return json.RawMessage(raw), nil
	}
	args := map[string]json.RawMessage{}
	for _, f := range fields {
		v := form.Get(f.FormName())
		if f.Input == "checkbox" {
			switch {
			case v != "":
				args[f.Name] = json.RawMessage("true")
			case f.Required:
				args[f.Name] = json.RawMessage("false")
			}
			continue
		}
		if v == "" && (!f.Required || f.Input != "text") {
			continue
		}
		switch f.Input {
		case "text", "select":
			b, _ := json.Marshal(v)
			args[f.Name] = b
		case "number":
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, errors.New(f.Name + ": not a number.")
			}
			args[f.Name] = json.RawMessage(strconv.FormatFloat(n, 'g', -1, 64))
		case "integer":
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return nil, errors.New(f.Name + ": not an integer.")
			}
			args[f.Name] = json.RawMessage(strconv.FormatInt(n, 10))
		default:
			if !json.Valid([]byte(v)) {
				return nil, errors.New(f.Name + ": not valid JSON.")
			}
			args[f.Name] = json.RawMessage(v)
		}
	}
	b, err := json.Marshal(args)
	return b, err
}

// tryCall calls a tool as the chosen caller, with a token minted for the
// call and revoked after it, and streams the answer page: the progress
// and log messages as they arrive, then the result.
func (c *Console) tryCall(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	form := r.PostForm
	q := url.Values{"tool": {form.Get("tool")}, "user": {form.Get("user")}, "token": {form.Get("token")}}
	d, status, msg, err := c.tryPrepare(r, ss, q, form)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	render := func(status int, msg string) {
		c.render(w, status, "try", pageData{Title: "Try it", Nav: "try", User: ss.user, Message: msg, Page: d})
	}
	if d.Tool == nil {
		if msg == "" {
			status, msg = http.StatusBadRequest, "Choose a tool to call."
		}
		render(status, msg)
		return
	}
	args, err := tryArguments(d.Fields, form)
	if err != nil {
		render(http.StatusBadRequest, err.Error())
		return
	}
	k := d.Caller
	ctx, cancel := context.WithTimeout(r.Context(), tryTimeout)
	defer cancel()
	// The call ends with the session and at shutdown too, not only when
	// the browser goes: this goroutine ends with ctx.
	go func() {
		select {
		case <-ss.ended:
		case <-c.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	req := admin.TokenRequest{User: k.User, TTL: tryTokenTTL, Name: clip.String("console try-it by "+ss.user, store.MaxTokenNameLen)}
	path := gateway.MCPPath
	if k.Listed != nil {
		req.Scopes, req.ReadOnly, req.Entities, req.Agents = k.Listed.Scopes, k.Listed.ReadOnly, k.Listed.Entities, k.Own
		if len(req.Scopes) == 0 { // nil would mint the default scopes
			render(http.StatusConflict, "Token "+k.TokenID+" has no scope: it may call nothing.")
			return
		}
		if len(k.Entities) > 0 {
			path += "/" + k.Entities[0].Type + "/" + k.Entities[0].ID
		}
	}
	minted, err := c.opts.Admin.CreateToken(adminCtx(ctx, ss), req)
	if err != nil {
		st, m := c.actionError(err)
		render(st, "The call's token could not be made: "+m)
		return
	}
	defer func() {
		// Whatever happened (the browser gone included): the token goes.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		if err := c.opts.Admin.RevokeToken(adminCtx(rctx, ss), minted.Token.ID); err != nil {
			c.log.WithError(err).WithField("token", minted.Token.ID).Error("try it: the call's token was not revoked; it expires in " + tryTokenTTL)
		}
	}()

	d.Run = &tryRun{Tool: d.Tool.Name, Caller: k.Describe(), TokenID: minted.Token.ID, Arguments: indentJSON(args)}
	var page bytes.Buffer
	if err := c.pages["try"].Execute(&page, pageData{Title: "Try it: " + d.Tool.Name, Nav: "try", User: ss.user, Page: d}); err != nil {
		c.log.WithError(err).Error("render try")
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	head, rest, ok1 := bytes.Cut(page.Bytes(), []byte(tryMarkEvents))
	middle, tail, ok2 := bytes.Cut(rest, []byte(tryMarkResult))
	if !ok1 || !ok2 {
		c.log.Error("render try: the page lacks its markers")
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(head)
	_ = rc.Flush()

	res := tryResult{}
	item := func(name string, v any) {
		if err := c.pages["try"].ExecuteTemplate(w, name, v); err != nil {
			c.log.WithError(err).Error("render " + name)
		}
		_ = rc.Flush()
	}
	ahead := func(m rpcMessage) {
		res.Events++
		if res.Events > tryMaxEvents {
			res.Dropped++
			return
		}
		item("try-event", tryEventOf(m))
	}
	start := time.Now()
	params := map[string]any{"name": d.Tool.Name, "arguments": args}
	msg2, err := c.mcpCall(ctx, c.opts.MCP, r, path, minted.Secret, "tools/call", params, ahead)
	res.Elapsed = time.Since(start).Round(time.Millisecond).String()
	switch {
	case err != nil:
		res.Error = err.Error()
		if ctx.Err() != nil {
			res.Error = "No answer within " + tryTimeout.String() + ": the call was cancelled."
		}
	case msg2.Error != nil:
		res.Error = msg2.Error.String()
		res.ErrorData = indentJSON(msg2.Error.Data)
	default:
		fillResult(&res, msg2.Result)
	}
	if res.Events == 0 {
		item("try-no-events", nil)
	}
	_, _ = w.Write(middle)
	item("try-result", res)
	_, _ = w.Write(tail)
	_ = rc.Flush()
}

func tryEventOf(m rpcMessage) tryEvent {
	switch m.Method {
	case "notifications/progress":
		var p struct {
			Progress float64 `json:"progress"`
			Total    float64 `json:"total"`
			Message  string  `json:"message"`
		}
		_ = json.Unmarshal(m.Params, &p)
		e := tryEvent{Kind: "progress", Progress: fmtNumber(p.Progress), Message: p.Message}
		if p.Total > 0 {
			e.Progress += " of " + fmtNumber(p.Total)
		}
		return e
	case "notifications/message":
		var p struct {
			Level  string          `json:"level"`
			Logger string          `json:"logger"`
			Data   json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(m.Params, &p)
		e := tryEvent{Kind: "log", Level: p.Level, Logger: p.Logger}
		var s string
		if json.Unmarshal(p.Data, &s) == nil {
			e.Data = s
		} else {
			e.Data = indentJSON(p.Data)
		}
		return e
	}
	return tryEvent{Kind: "other", Method: m.Method, Data: indentJSON(m.Params)}
}

func fmtNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// fillResult reads a CallToolResult: text content as text, any other
// content as indented JSON, structuredContent as indented JSON.
func fillResult(res *tryResult, raw json.RawMessage) {
	var r struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		IsError           bool              `json:"isError"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		res.Error = "The result is not a tool result: " + err.Error()
		res.Structured = indentJSON(raw)
		return
	}
	res.IsError = r.IsError
	for _, c := range r.Content {
		var t struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(c, &t)
		if t.Type == "text" {
			res.Content = append(res.Content, tryContent{Type: "text", Text: t.Text})
			continue
		}
		res.Content = append(res.Content, tryContent{Type: t.Type, JSON: indentJSON(c)})
	}
	if len(r.StructuredContent) > 0 && string(r.StructuredContent) != "null" {
		res.Structured = indentJSON(r.StructuredContent)
	}
}
