package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// The Tools page (this file) shows the tools a chosen user or token sees,
// platform and agent tools together, with the source of each, and the
// tools it does not see with the reason; the Try it page (try.go) calls
// one of them as that caller. Both ask the gateway itself: tools/list
// through Options.ServeAs (the path a client's request takes, without a
// secret), tools/call through Options.MCP with a token minted for the call.

// toolsRoutes adds the Tools page and the Try it page.
func (c *Console) toolsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+Path+"tools", c.withSession(c.toolsPage))
	mux.HandleFunc("GET "+Path+"try", c.withSession(c.tryPage))
	mux.HandleFunc("POST "+Path+"try", c.withSession(c.tryCall))
}

// mcpVersion is the protocol version the console's requests speak: the
// stateless era (no initialize, no session; _meta on every request).
const mcpVersion = "2026-07-28"

// Bounds of the console's MCP requests.
const (
	// toolsListTimeout bounds listing the tools as a caller (every page).
	toolsListTimeout = 15 * time.Second
	// toolsMaxPages bounds the tools/list pages read for one caller.
	toolsMaxPages = 50
	// maxListAnswer bounds the bytes of a tools/list page the console
	// reads; maxCallAnswer those of a Try it call's answer (its stream).
	maxListAnswer = 8 << 20
	maxCallAnswer = 2 << 20
)

// toolsCaller is who the Tools and Try it pages act as: a user alone (the
// default scopes and the user's agent grants) or one of their tokens.
type toolsCaller struct {
	User    string
	TokenID string // "" for a user alone
	// Tok is the token the gateway is asked as (ServeAs): its Agents are
	// the token's own narrowed by the user's grants, as authentication
	// narrows them (store.AuthenticateToken); no Entities (listing is done
	// at the plain endpoint).
	Tok store.Token
	// Own are the token's own agents (nil: every agent); Grants the
	// user's (nil: no limit).
	Own, Grants []string
	// Entities are the token's entities ([] any): Try it calls at the first.
	Entities []store.Entity
	// Listed is the admin model's row of the token (nil for a user).
	Listed *admin.Token
}

// Describe says who the caller is, for a heading.
func (k *toolsCaller) Describe() string {
	if k.TokenID != "" {
		return "token " + k.TokenID + " of " + k.User
	}
	return "user " + k.User + " (a token with the default scopes)"
}

// EffectiveAgents is the agents the caller may use, for the page.
func (k *toolsCaller) EffectiveAgents() string {
	if k.Tok.Agents == nil {
		return "every agent"
	}
	if len(k.Tok.Agents) == 0 {
		return "none (the token's agents and the user's grants share none)"
	}
	return strings.Join(k.Tok.Agents, ", ")
}

// Scopes are the caller's scopes, for the page.
func (k *toolsCaller) Scopes() string { return strings.Join(k.Tok.Scopes, ", ") }

// GrantsText and OwnText are the grants and the token's agents, for the page.
func (k *toolsCaller) GrantsText() string { return listOr(k.Grants, "no limit (every agent)") }
func (k *toolsCaller) OwnText() string    { return listOr(k.Own, "every agent") }

func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}

// toolsPick is the form that chooses the caller (and, on Try it, the tool).
type toolsPick struct {
	Action string // the page the form is sent to
	Users  []string
	User   string
	Tokens []toolsTokenOption
	Token  string
	Tool   string
	// Tools are the caller's tool names, for Try it's tool select.
	Tools []string
}

type toolsTokenOption struct{ ID, Label string }

// toolsResolve reads the caller a page is asked for (token wins over
// user) and the choices of the form. It returns a nil caller when none was
// chosen or the choice cannot be used; msg and status then say why ("" if
// nothing was chosen).
func (c *Console) toolsResolve(ctx context.Context, ss *session, q url.Values, action string) (*toolsCaller, toolsPick, int, string, error) {
	actx := adminCtx(ctx, ss)
	pick := toolsPick{Action: action, User: q.Get("user"), Token: q.Get("token"), Tool: q.Get("tool")}
	toks, err := c.opts.Admin.ListTokens(actx, "")
	if err != nil {
		return nil, pick, 0, "", err
	}
	users, err := c.opts.Admin.ListUsers(actx)
	if err != nil {
		return nil, pick, 0, "", err
	}
	grants, err := c.opts.Admin.ListUserAgents(actx)
	if err != nil {
		return nil, pick, 0, "", err
	}
	now := time.Now()
	seen := map[string]bool{}
	addUser := func(u string) {
		if u != "" && !seen[u] {
			seen[u] = true
			pick.Users = append(pick.Users, u)
		}
	}
	for _, u := range users {
		addUser(u.ID)
	}
	for _, g := range grants {
		addUser(g.User)
	}
	var found *admin.Token
	for i, t := range toks {
		if t.ID == pick.Token {
			found = &toks[i]
		}
		if t.RevokedAt != nil || (t.ExpiresAt != nil && !t.ExpiresAt.After(now)) {
			continue
		}
		addUser(t.User)
		label := t.ID + " · " + t.User
		if t.Name != "" {
			label += " · " + clip.Marked(t.Name, 60)
		}
		pick.Tokens = append(pick.Tokens, toolsTokenOption{ID: t.ID, Label: label})
	}
	slices.Sort(pick.Users)
	grantsOf := func(user string) []string {
		for _, g := range grants {
			if g.User == user && len(g.Agents) > 0 {
				return g.Agents
			}
		}
		return nil
	}
	switch {
	case pick.Token != "":
		if found == nil {
			return nil, pick, http.StatusNotFound, "There is no token " + pick.Token + ".", nil
		}
		pick.User = found.User
		if found.RevokedAt != nil {
			return nil, pick, http.StatusConflict, "Token " + found.ID + " is revoked: the gateway refuses it, so it sees no tool.", nil
		}
		if found.ExpiresAt != nil && !found.ExpiresAt.After(now) {
			return nil, pick, http.StatusConflict, "Token " + found.ID + " has expired: the gateway refuses it, so it sees no tool.", nil
		}
		var own []string
		if len(found.Agents) > 0 {
			own = found.Agents
		}
		k := &toolsCaller{User: found.User, TokenID: found.ID, Own: own, Grants: grantsOf(found.User), Entities: found.Entities, Listed: found}
		k.Tok = store.Token{ID: found.ID, UserID: found.User, Scopes: found.Scopes, ReadOnly: found.ReadOnly,
			Agents: store.NarrowAgents(own, k.Grants), Name: found.Name, Audience: found.Audience, ClientID: found.Client}
		return k, pick, http.StatusOK, "", nil
	case pick.User != "":
		if err := contract.ValidateLevel(pick.User); err != nil {
			return nil, pick, http.StatusBadRequest, "No user can be named " + strconv.Quote(clip.Marked(pick.User, maxLoggedUser)) + ".", nil
		}
		k := &toolsCaller{User: pick.User, Grants: grantsOf(pick.User)}
		k.Tok = store.Token{ID: "console", UserID: pick.User, Scopes: store.DefaultScopes, Agents: store.NarrowAgents(nil, k.Grants)}
		return k, pick, http.StatusOK, "", nil
	}
	return nil, pick, http.StatusOK, "", nil
}

// listedTool is one tool of a tools/list answer.
type listedTool struct {
	Name        string          `json:"name"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Annotations *struct {
		Title        string `json:"title"`
		ReadOnlyHint bool   `json:"readOnlyHint"`
	} `json:"annotations"`
	Meta map[string]json.RawMessage `json:"_meta"`
	// agentName is the agent of a tool read from the admin model rather
	// than a list answer (toolsSeenBy).
	agentName string
}

// agent is the agent that serves the tool (the gateway's _meta); "" for a
// platform tool.
func (t listedTool) agent() string {
	if t.agentName != "" {
		return t.agentName
	}
	var a string
	if raw, ok := t.Meta[gateway.MetaAgent]; ok {
		_ = json.Unmarshal(raw, &a)
	}
	return a
}

func (t listedTool) readOnly() bool { return t.Annotations != nil && t.Annotations.ReadOnlyHint }

func (t listedTool) title() string {
	if t.Title == "" && t.Annotations != nil {
		return t.Annotations.Title
	}
	return t.Title
}

// toolsSeenBy lists the tools tok sees: the platform tools through the
// gateway's tools/list (listAs, with no agent, so that it lists only
// those), then the agent tools from the caller's union as the admin model
// reads it (gateway.UnionTools: the catalog tools/list serves from,
// decoded once), each with why it is qualified, by name in mine. Asking
// tools/list for every agent's tools as well would encode and decode
// thousands of tools at each view.
func (c *Console) toolsSeenBy(ctx context.Context, r *http.Request, tok store.Token) (listed []listedTool, mine map[string]admin.AgentTool, err error) {
	platform := tok
	platform.Agents = []string{} // none: AllowsAgent is false for every agent
	if listed, err = c.listAs(ctx, r, platform); err != nil {
		return nil, nil, err // a token without tools:list lists nothing at all
	}
	mine = map[string]admin.AgentTool{}
	ag, err := c.opts.Admin.Agents(store.WithToken(ctx, tok, ""))
	if err != nil && !errors.Is(err, admin.ErrNoServer) {
		return listed, mine, err
	}
	for _, t := range ag.Tools {
		mine[t.Name] = t
		lt := listedTool{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema, agentName: t.Agent}
		if t.ReadOnly {
			lt.Annotations = &struct {
				Title        string `json:"title"`
				ReadOnlyHint bool   `json:"readOnlyHint"`
			}{ReadOnlyHint: true}
		}
		listed = append(listed, lt)
	}
	return listed, mine, nil
}

// listAs lists the tools tok sees, every page, through the gateway's
// tools/list (Options.ServeAs): the answer a client holding tok gets.
func (c *Console) listAs(ctx context.Context, r *http.Request, tok store.Token) ([]listedTool, error) {
	ctx, cancel := context.WithTimeout(ctx, toolsListTimeout)
	defer cancel()
	tok.Entities = nil // listed at the plain endpoint
	var out []listedTool
	cursor := ""
	for range toolsMaxPages {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		msg, err := c.mcpCall(ctx, c.opts.ServeAs(tok), r, gateway.MCPPath, "", "tools/list", params, nil)
		if err != nil {
			return nil, err
		}
		if msg.Error != nil {
			return nil, errors.New(msg.Error.String())
		}
		var page struct {
			Tools      []listedTool `json:"tools"`
			NextCursor string       `json:"nextCursor"`
		}
		if err := json.Unmarshal(msg.Result, &page); err != nil {
			return nil, errors.New("the gateway's tools/list answer could not be read: " + err.Error())
		}
		out = append(out, page.Tools...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	return out, nil
}

// rpcMessage is one JSON-RPC message from the gateway: a notification
// (Method) or the final response (Result or Error).
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *rpcError) String() string {
	return e.Message + " (JSON-RPC error " + strconv.Itoa(e.Code) + ")"
}

func (m *rpcMessage) final() bool { return m.Method == "" && (m.Result != nil || m.Error != nil) }

// mcpCall sends one request of the stateless protocol to h, as a client
// would (the headers and _meta that era wants), at path on the console
// request's host, with secret as its bearer token if any. Each message the
// gateway sends ahead of the answer (progress, log) goes to ahead as it
// arrives (nil: ask for JSON only). It returns the final response, or an
// error when the gateway refused the request outright (401, 403 with its
// own error shape) or its answer could not be read.
func (c *Console) mcpCall(ctx context.Context, h http.Handler, r *http.Request, path, secret, method string, params map[string]any, ahead func(rpcMessage)) (rpcMessage, error) {
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    mcpVersion,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "toolbus-console", "version": c.opts.Version},
	}
	if ahead != nil {
		meta["io.modelcontextprotocol/logLevel"] = "debug"
		meta["progressToken"] = "console-try"
	}
	params["_meta"] = meta
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return rpcMessage{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.Host+path, bytes.NewReader(body))
	if err != nil {
		return rpcMessage{}, err
	}
	req.Host = r.Host
	// The gateway's audit and limits see the operator's browser.
	req.RemoteAddr = r.RemoteAddr
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		req.Header["X-Forwarded-For"] = xff
	}
	req.Header.Set("Content-Type", "application/json")
	if ahead != nil {
		req.Header.Set("Accept", "application/json, text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("MCP-Protocol-Version", mcpVersion)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	cw := &mcpCapture{header: http.Header{}, ahead: ahead, limit: maxListAnswer}
	if ahead != nil {
		cw.limit = maxCallAnswer
	}
	h.ServeHTTP(cw, req)
	return cw.answer()
}

// mcpCapture is the ResponseWriter the gateway answers the console on, in
// the process: it reads a JSON answer whole, and an event stream event by
// event as it is written, handing the messages ahead of the answer to
// ahead at once. It reads at most limit bytes.
type mcpCapture struct {
	limit  int
	header http.Header
	status int
	sse    bool
	buf    []byte
	total  int
	over   bool
	final  *rpcMessage
	ahead  func(rpcMessage)
}

func (w *mcpCapture) Header() http.Header { return w.header }

func (w *mcpCapture) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	mt, _, _ := mime.ParseMediaType(w.header.Get("Content-Type"))
	w.sse = mt == "text/event-stream"
}

func (w *mcpCapture) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.total += len(p)
	if w.over || w.total > w.limit {
		w.over, w.buf = true, nil
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	if w.sse {
		w.events()
	}
	return len(p), nil
}

// Flush implements http.Flusher: the gateway flushes each event, which
// Write has already handed on.
func (w *mcpCapture) Flush() {}

// events hands on every complete event in buf.
func (w *mcpCapture) events() {
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			return
		}
		ev := w.buf[:i]
		w.buf = w.buf[i+2:]
		var data [][]byte
		for _, line := range bytes.Split(ev, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = append(data, bytes.TrimPrefix(d, []byte(" ")))
			}
		}
		if len(data) == 0 {
			continue // a comment (keep-alive)
		}
		var m rpcMessage
		if json.Unmarshal(bytes.Join(data, []byte("\n")), &m) != nil {
			continue
		}
		if m.final() {
			w.final = &m
		} else if w.ahead != nil {
			w.ahead(m)
		}
	}
}

// answer is the final response once the handler returned.
func (w *mcpCapture) answer() (rpcMessage, error) {
	switch {
	case w.over:
		return rpcMessage{}, errors.New("the gateway's answer was over " + strconv.Itoa(w.limit>>20) + " MiB: not shown")
	case w.final != nil:
		return *w.final, nil
	case w.sse:
		return rpcMessage{}, errors.New("the gateway's stream ended without an answer (the call was cancelled or timed out)")
	}
	var m rpcMessage
	if err := json.Unmarshal(w.buf, &m); err == nil && m.final() {
		return m, nil
	}
	// The gateway's own refusal shape: {"error": code, "message": text}.
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(w.buf, &e) == nil && e.Message != "" {
		return rpcMessage{}, errors.New("the gateway refused the request (HTTP " + strconv.Itoa(w.status) + ", " + e.Error + "): " + e.Message)
	}
	return rpcMessage{}, errors.New("the gateway answered HTTP " + strconv.Itoa(w.status) + " without a JSON-RPC response")
}

// toolsRow is one tool the caller sees.
type toolsRow struct {
	Name, Title, Description string
	// Agent serves it; "" for a platform tool.
	Agent string
	// Served is the agent's own name for it when Name is not it;
	// Qualified says why Name is <agent>.<tool>.
	Served, Qualified string
	ReadOnly          bool
	// Note says why the caller may not call a tool it sees.
	Note        string
	InputSchema json.RawMessage
	Schema      string // the input schema, indented (the rows shown only)
}

// Source is "platform" or the agent's name.
func (t toolsRow) Source() string {
	if t.Agent == "" {
		return "platform"
	}
	return t.Agent
}

// toolsHidden is a tool the operator's view has and the caller's lacks.
type toolsHidden struct {
	Name, Source, Reason string
}

type toolsData struct {
	Pick    toolsPick
	Caller  *toolsCaller
	Visible []toolsRow
	Hidden  []toolsHidden
	// Filter (?q=) keeps the tools whose name or agent holds it; the
	// lists show toolsPageSize rows a page (?page=, from 1): VisibleTotal
	// and HiddenTotal count the rows past the filter, PrevPage and
	// NextPage are 0 where there is none.
	Filter                    string
	Page, PrevPage, NextPage  int
	VisibleTotal, HiddenTotal int
	// ListError says why the caller's list is missing; AgentsError why
	// the agent tools are (no agent answered).
	ListError, AgentsError string
}

// platformScopes are the scopes the built-in platform tools need, by name.
var platformScopes = func() map[string]string {
	m := map[string]string{}
	for _, t := range platformtools.Builtins() {
		m[t.Name] = t.Scope
	}
	return m
}()

func (c *Console) toolsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	d := toolsData{}
	render := func(status int, msg string) {
		c.render(w, status, "tools", pageData{Title: "Tools", Nav: "tools", User: ss.user, Message: msg, Page: d})
	}
	k, pick, status, msg, err := c.toolsResolve(r.Context(), ss, r.URL.Query(), Path+"tools")
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	d.Pick, d.Caller = pick, k
	if c.opts.ServeAs == nil {
		render(http.StatusServiceUnavailable, "This server has no MCP gateway to ask: the Tools page is not available.")
		return
	}
	if k == nil {
		render(status, msg)
		return
	}
	d.Visible, d.Hidden, d.ListError, d.AgentsError = c.toolsOf(r, ss, k)
	d.paginate(r.URL.Query())
	render(http.StatusOK, "")
}

// toolsPageSize is the rows of each list the Tools page shows at once:
// with thousands of agent tools online a page of all of them would take
// the server and the browser long to render.
const toolsPageSize = 200

// paginate keeps the rows that match the filter (?q=, in the name or the
// agent, any case) on the page asked (?page=), and indents the input
// schemas of the rows shown only.
func (d *toolsData) paginate(q url.Values) {
	d.Filter = strings.TrimSpace(q.Get("q"))
	if d.Filter != "" {
		f := strings.ToLower(d.Filter)
		match := func(name, agent string) bool {
			return strings.Contains(strings.ToLower(name), f) || strings.Contains(strings.ToLower(agent), f)
		}
		d.Visible = slices.DeleteFunc(d.Visible, func(t toolsRow) bool { return !match(t.Name, t.Agent) })
		d.Hidden = slices.DeleteFunc(d.Hidden, func(t toolsHidden) bool { return !match(t.Name, t.Source) })
	}
	d.VisibleTotal, d.HiddenTotal = len(d.Visible), len(d.Hidden)
	pages := max(1, (max(d.VisibleTotal, d.HiddenTotal)+toolsPageSize-1)/toolsPageSize)
	d.Page, _ = strconv.Atoi(q.Get("page"))
	d.Page = min(max(d.Page, 1), pages)
	if d.Page > 1 {
		d.PrevPage = d.Page - 1
	}
	if d.Page < pages {
		d.NextPage = d.Page + 1
	}
	from := (d.Page - 1) * toolsPageSize
	d.Visible = d.Visible[min(from, len(d.Visible)):min(from+toolsPageSize, len(d.Visible))]
	d.Hidden = d.Hidden[min(from, len(d.Hidden)):min(from+toolsPageSize, len(d.Hidden))]
	for i := range d.Visible {
		d.Visible[i].Schema = indentJSON(d.Visible[i].InputSchema)
	}
}

// toolsOf lists what k sees and what it does not (with the reasons),
// against the operator's full view: every platform tool (listed with
// every scope) and every agent's tools (the admin model's Agents).
func (c *Console) toolsOf(r *http.Request, ss *session, k *toolsCaller) (visible []toolsRow, hidden []toolsHidden, listErr, agentsErr string) {
	ctx := r.Context()
	listed, mine, err := c.toolsSeenBy(ctx, r, k.Tok)
	if err != nil {
		listErr = "The gateway did not list the tools for " + k.Describe() + ": " + err.Error()
	}
	type key struct{ agent, served string }
	seenAgent := map[key]bool{}
	seenPlatform := map[string]bool{}
	for _, t := range listed {
		row := toolsRow{Name: t.Name, Title: t.title(), Description: t.Description, Agent: t.agent(), ReadOnly: t.readOnly(), InputSchema: t.InputSchema}
		if row.Agent == "" {
			seenPlatform[t.Name] = true
		} else {
			served := t.Name
			if u, ok := mine[t.Name]; ok {
				row.Qualified = u.Qualified
				if u.Served != "" {
					served = u.Served
				}
			} else if s, ok := strings.CutPrefix(t.Name, row.Agent+gateway.AgentSeparator); ok {
				served = s
			}
			if served != t.Name {
				row.Served = served
			}
			seenAgent[key{row.Agent, served}] = true
		}
		switch {
		case !k.Tok.HasScope(store.ScopeToolsCall):
			row.Note = "Listed, but the token lacks the tools:call scope: calls are refused."
		case k.Tok.ReadOnly && !row.ReadOnly:
			row.Note = "Listed, but this token is read-only: only tools annotated readOnlyHint may be called, and this one is not."
		}
		visible = append(visible, row)
	}
	// The operator's view: every platform tool (listed with every scope
	// and no agent: the agent tools come from the admin model below).
	full := store.Token{ID: "console", UserID: ss.user, Scopes: c.opts.Admin.ValidScopes(), Agents: []string{}}
	all, err := c.listAs(ctx, r, full)
	if err != nil {
		c.log.WithError(err).Warn("tools page: the full list")
	}
	noList := !k.Tok.HasScope(store.ScopeToolsList)
	const noListReason = "The token lacks the tools:list scope: it lists no tool."
	for _, t := range all {
		if t.agent() != "" || seenPlatform[t.Name] {
			continue
		}
		reason := noListReason
		if !noList {
			if sc := platformScopes[t.Name]; sc != "" {
				reason = "The tool needs the " + sc + " scope, which the token lacks."
			} else {
				reason = "The tool needs a scope the token lacks."
			}
		}
		hidden = append(hidden, toolsHidden{Name: t.Name, Source: "platform", Reason: reason})
	}
	ag, err := c.opts.Admin.Agents(adminCtx(ctx, ss))
	switch {
	case errors.Is(err, admin.ErrNoServer):
	case err != nil:
		agentsErr = "The agents' tools could not be read: " + err.Error()
	default:
		agentsErr = ag.ToolsError
		for _, t := range ag.Tools {
			served := t.Name
			if t.Served != "" {
				served = t.Served
			}
			if seenAgent[key{t.Agent, served}] {
				continue
			}
			var reason string
			switch {
			case noList:
				reason = noListReason
			case len(k.Grants) > 0 && !slices.Contains(k.Grants, t.Agent):
				reason = "Agent " + t.Agent + " is not granted to user " + k.User + " (the user's grants: " + strings.Join(k.Grants, ", ") + ")."
			case k.Own != nil && !slices.Contains(k.Own, t.Agent):
				reason = "Agent " + t.Agent + " is outside the token's agents (" + strings.Join(k.Own, ", ") + ")."
			case listErr != "":
				reason = "The caller's list could not be read."
			default:
				reason = "Agent " + t.Agent + " did not list it to this caller (agents may list per caller), or its name was taken (the server log says so)."
			}
			hidden = append(hidden, toolsHidden{Name: t.Name, Source: t.Agent, Reason: reason})
		}
	}
	return visible, hidden, listErr, agentsErr
}
