package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// encodePlatformTools encodes each platform tool once, as tools/list shows it.
func (g *Gateway) encodePlatformTools() error {
	g.platformRaw = map[string]json.RawMessage{}
	if g.opts.Platform == nil {
		return nil
	}
	for _, t := range g.opts.Platform.Tools() {
		b, err := json.Marshal(t) // platformtools.Tool encodes itself as MCP lists it
		if err != nil {
			return fmt.Errorf("%w: platform tool %s: %v", ErrOptions, t.Name, err)
		}
		g.platformRaw[t.Name] = b
	}
	return nil
}

func (g *Gateway) platformTaken(name string) bool {
	_, ok := g.platformRaw[name]
	return ok
}

func callerOf(tok store.Token) *contract.Caller {
	return &contract.Caller{UserID: tok.UserID, Scopes: tok.Scopes, ReadOnly: tok.ReadOnly}
}

// agentCatalog returns the expert agents' tools for the request's context.
func (g *Gateway) agentCatalog(r *request) (*agentCatalog, error) {
	return g.catalogs.get(r.ctx, r.bus, r.tok.Agents, g.opts.Agents.PresenceGeneration(), func(ctx context.Context, stale *agentCatalog) (*agentCatalog, error) {
		return g.fetchCatalog(ctx, r.bus, r.tok, stale, g.logger(r.ctx))
	})
}

// fetchCatalog builds the union of the online agents' tools in a context.
// It asks, concurrently, every agent whose answer the stale catalog does
// not hold still fresh (its own presence changed, or its TTL passed) for
// all pages of its tool list: another agent's coming, going or churn
// costs the others nothing. An agent that fails or does not answer within
// ListTimeout is left out (logged and counted), and the union is marked
// partial so that it is asked again soon; only when every agent fails is
// it an error.
func (g *Gateway) fetchCatalog(ctx context.Context, key contract.Context, tok store.Token, stale *agentCatalog, log *logrus.Entry) (*agentCatalog, error) {
	// Shared by concurrent requests of the context: one caller leaving must
	// not cancel the fetch for the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.ListTimeout)
	defer cancel()
	// Only the agents the token may use: names are computed over what the
	// caller can see, never qualified for an agent it cannot.
	online := slices.DeleteFunc(g.opts.Agents.OnlineAgents(ctx), func(a string) bool { return !tok.AllowsAgent(a) })
	if len(online) == 0 {
		return nil, requester.ErrNoAgent
	}
	g.byOnlineSince(online)
	held := map[string]agentAnswer{}
	if stale != nil {
		for _, a := range stale.answers {
			held[a.list.agent] = a
		}
	}
	// An agent that let its last list time out is not waited for again
	// until silentRetry has passed: one silent agent costs the union one
	// ListTimeout, not one per context.
	answers := make([]agentAnswer, len(online))
	errs := make([]error, len(online))
	skipped := false
	var wg sync.WaitGroup
	for i, agent := range online {
		gen := g.agentGeneration(agent)
		if a, ok := held[agent]; ok && g.catalogs.reusable(a, gen) {
			answers[i] = a
			continue
		}
		if until, ok := g.silent.Load(agent); ok && time.Now().Before(until.(time.Time)) {
			skipped = true
			errs[i] = errSkipped
			continue
		}
		wg.Go(func() {
			answers[i].gen, answers[i].fetched = gen, g.catalogs.now()
			answers[i].list, errs[i] = g.fetchAgentList(ctx, key, agent, tok, log)
		})
	}
	wg.Wait()
	c := &agentCatalog{partial: skipped}
	var lists []*agentList
	var failed []error
	for i, agent := range online {
		switch {
		case errs[i] == errSkipped:
			continue
		case errs[i] != nil:
			g.stats.agentListFailed()
			if errors.Is(errs[i], requester.ErrTimeout) {
				g.silent.Store(agent, time.Now().Add(silentRetry))
			}
			log.WithError(errs[i]).WithField("agent", agent).Warn("tools/list without this agent's tools")
			failed = append(failed, fmt.Errorf("agent %s: %w", agent, errs[i]))
			c.partial = true
			continue
		}
		g.silent.Delete(agent)
		a := answers[i]
		if c.fetched.IsZero() || a.fetched.Before(c.fetched) {
			c.fetched = a.fetched
		}
		c.answers = append(c.answers, a)
		lists = append(lists, a.list)
	}
	if len(lists) == 0 {
		if len(failed) == 0 {
			return nil, fmt.Errorf("%w: every online agent let its tool list time out lately", requester.ErrTimeout)
		}
		return nil, errors.Join(failed...)
	}
	set, err := g.toolSets.union(lists, tok.Agents == nil, func() (*toolSet, error) {
		set, left := buildUnion(lists, g.platformTaken, g.opts.AgentToolNames == NamesAlwaysQualify)
		if !left.empty() {
			g.stats.addLeftOut(left)
			log.WithFields(left.fields()).Warn("agent tools left out of the union: their names are taken")
		}
		return set, nil
	})
	if err != nil {
		return nil, err
	}
	c.toolSet = set
	return c, nil
}

// agentOnlineSince is an AgentRequester that says since when each agent
// has been online (*requester.Requester). Without it agents are ordered by
// name.
type agentOnlineSince interface {
	AgentOnlineSince(agent string) (time.Time, bool)
}

// byOnlineSince sorts agents (sorted by name) so that the agent online
// longest comes first, ties by name: buildUnion gives it the plain names
// it shares with later ones. The order is part of the union's key
// (toolSets.union), so an agent that comes back after a break, a newcomer
// then, gets another union.
func (g *Gateway) byOnlineSince(agents []string) {
	os, ok := g.opts.Agents.(agentOnlineSince)
	if !ok || len(agents) < 2 {
		return
	}
	since := make(map[string]int64, len(agents))
	for _, a := range agents {
		t, online := os.AgentOnlineSince(a)
		if !online {
			since[a] = math.MaxInt64 // went meanwhile: last
			continue
		}
		since[a] = t.UnixMilli()
	}
	slices.SortStableFunc(agents, func(a, b string) int { return cmp.Compare(since[a], since[b]) })
}

// errSkipped marks an agent left out of a union because it was silent
// lately.
var errSkipped = errors.New("silent lately: not asked")

// silentRetry is how long an agent whose tool list timed out is left out of
// the union before it is asked again.
const silentRetry = 5 * time.Second

// fetchAgentList asks one agent for its tool list and keeps what the
// bounds allow (decodeAgentList), shared with the contexts that got the
// same answer. What it leaves out is counted each time, and logged in one
// line when the answer is new.
func (g *Gateway) fetchAgentList(ctx context.Context, key contract.Context, agent string, tok store.Token, log *logrus.Entry) (*agentList, error) {
	lim := g.toolListLimits()
	a, err := g.fetchAgentTools(ctx, key, agent, tok, lim.bytes)
	if err != nil {
		return nil, err
	}
	g.stats.agentListAsked()
	l, fresh, err := g.toolSets.agentList(a, lim.bytes, func() (*agentList, error) { return decodeAgentList(a, lim) })
	if err != nil {
		return nil, err
	}
	g.stats.addLeftOut(l.left)
	if fresh && !l.left.empty() {
		log.WithField("agent", agent).WithFields(l.left.fields()).Warn("agent tools left out of tools/list (bounds: --max-agent-tools, --max-agent-list-bytes, --max-tool-bytes)")
	}
	return l, nil
}

// fetchAgentTools asks one agent for the pages of its tool list, until
// there is no next page, maxToolPages, or maxBytes of pages.
func (g *Gateway) fetchAgentTools(ctx context.Context, key contract.Context, agent string, tok store.Token, maxBytes int) (agentPages, error) {
	a := agentPages{agent: agent}
	var cursor string
	size := 0
	for page := 0; ; page++ {
		if page == maxToolPages || size >= maxBytes {
			a.cut = true
			break
		}
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		start := time.Now()
		m, err := g.opts.Agents.Request(ctx, key, agent, callerOf(tok), "tools/list", params, nil)
		if g.opts.Observer != nil {
			g.opts.Observer.AgentRequest("tools/list", time.Since(start), err)
		}
		if err != nil {
			return agentPages{}, err
		}
		if m.Error != nil {
			return agentPages{}, m.Error
		}
		a.pages = append(a.pages, m.Result)
		size += len(m.Result)
		var next struct {
			NextCursor string `json:"nextCursor"`
		}
		_ = json.Unmarshal(m.Result, &next)
		if cursor = next.NextCursor; cursor == "" {
			break
		}
	}
	return a, nil
}

func (g *Gateway) toolsList(r *request) answer {
	if !r.tok.HasScope(store.ScopeToolsList) {
		return g.lacksScope(r, store.ScopeToolsList)
	}
	var items []json.RawMessage
	if g.opts.Platform != nil {
		for _, t := range g.opts.Platform.Tools() {
			if platformtools.Visible(r.tok, t) {
				items = append(items, g.platformRaw[t.Name])
			}
		}
	}
	cat, err := g.agentCatalog(r)
	if err != nil {
		// The platform tools still come back, at once; the gap is logged and counted.
		g.stats.agentListFailed()
		g.logger(r.ctx).WithError(err).Warn("tools/list without expert-agent tools")
	} else {
		for _, t := range cat.tools {
			if r.tok.AllowsAgent(t.agent) {
				items = append(items, t.raw)
			}
		}
	}
	// Platform tools first, then the agent's, each sorted by name: the
	// order is stable, so an offset is a cursor.
	start, err := decodeCursor(r.p.Cursor)
	if err != nil || start > len(items) {
		return invalidParams("invalid cursor")
	}
	end := min(start+g.opts.ToolsPageSize, len(items))
	page := items[start:end]
	n := 64
	for _, it := range page {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"tools":[`...)
	for i, it := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	b = append(b, ']')
	if end < len(items) {
		b = append(b, `,"nextCursor":"`...)
		b = append(b, encodeCursor(end)...)
		b = append(b, '"')
	}
	if r.modern {
		b = append(b, `,"ttlMs":0,"cacheScope":"private"`...)
	}
	return result(append(b, '}'))
}

// Cursors of tools/list are opaque to clients: an offset into the stable
// order of the union, in base64url.
func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(offset)))
}

func decodeCursor(c string) (int, error) {
	if c == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != 'o' {
		return 0, errors.New("invalid cursor")
	}
	n, err := strconv.Atoi(string(b[1:]))
	if err != nil || n < 0 {
		return 0, errors.New("invalid cursor")
	}
	return n, nil
}

func (g *Gateway) toolsCall(r *request) answer {
	if !r.tok.HasScope(store.ScopeToolsCall) {
		return g.lacksScope(r, store.ScopeToolsCall)
	}
	name := r.p.Name
	if name == "" {
		return invalidParams("params.name is required")
	}
	start := time.Now()
	if g.opts.Observer != nil {
		defer g.observeCall(r, name, start)
	}
	if g.opts.Platform != nil {
		if t, ok := g.opts.Platform.Lookup(name); ok {
			return g.platformCall(r, t, start)
		}
	}
	return g.agentCall(r, name, start)
}

// platformCall runs a platform tool in-process.
func (g *Gateway) platformCall(r *request, t platformtools.Tool, start time.Time) answer {
	if !platformtools.Visible(r.tok, t) {
		r.setOutcome(OutcomeRefused, "unknown_tool")
		return invalidParams("unknown tool %q", t.Name)
	}
	r.outcome.source = SourcePlatform
	if r.tok.ReadOnly && !t.ReadOnly() {
		return g.forbidden(r, "a read-only token may call only tools annotated readOnlyHint: true")
	}
	res, err := g.opts.Platform.Call(r.ctx, &platformtools.Call{
		Name: t.Name, Arguments: r.p.Arguments, Token: r.tok, Secret: r.secret, Context: r.bus,
	})
	switch {
	case errors.Is(err, platformtools.ErrUnknownTool):
		r.setOutcome(OutcomeRefused, "unknown_tool")
		return invalidParams("unknown tool %q", t.Name)
	case errors.Is(err, platformtools.ErrForbidden):
		return g.forbidden(r, err.Error())
	case err != nil:
		r.setOutcome(OutcomeError, "platform_failure")
		g.toolLog(r, t.Name).WithError(err).Error("platform tool failed")
		return failure(jsonrpc.NewError(jsonrpc.CodeInternalError, "platform tool %s failed", t.Name))
	}
	g.debugCall(r, t.Name, SourcePlatform, start)
	if g.opts.Observer != nil {
		r.resultOutcome(res)
	}
	return result(res)
}

// toolLog is the logger of one tool call, built when something is logged.
func (g *Gateway) toolLog(r *request, name string) *logrus.Entry {
	return g.logger(r.ctx).WithField("tool", name)
}

// debugCall logs a finished call at debug level, without building the
// entry when debug is off (the hot path).
func (g *Gateway) debugCall(r *request, name, source string, start time.Time) {
	if g.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		g.toolLog(r, name).WithFields(logrus.Fields{"source": source, "ms": time.Since(start).Milliseconds()}).Debug("tools/call")
	}
}

// agentCall proxies a tools/call to the expert agents over MQTT, relaying
// their notifications while it runs.
func (g *Gateway) agentCall(r *request, name string, start time.Time) answer {
	t, ok, err := g.agentToolOf(r, name)
	if err != nil {
		return g.agentFailure(r, name, err)
	}
	if !ok {
		r.setOutcome(OutcomeRefused, "unknown_tool")
		if hint := g.didYouMean(r, name); hint != "" {
			return invalidParams("unknown tool %q; did you mean %q?", name, hint)
		}
		return invalidParams("unknown tool %q", name)
	}
	r.outcome.source, r.outcome.agent = SourceAgent, t.agent
	if r.tok.ReadOnly && !t.readOnly {
		return g.forbidden(r, "a read-only token may call only tools annotated readOnlyHint: true")
	}
	if ok, wait, what := g.limits.Load().allowAgentCall(t.agent); !ok {
		return g.rateLimitedCall(r, what, wait)
	}
	params := r.params
	// The agent knows its own name: not a qualified one, listed or not.
	if name != t.name {
		var p map[string]json.RawMessage
		if err := json.Unmarshal(params, &p); err != nil {
			return invalidParams("invalid params")
		}
		p["name"], _ = json.Marshal(t.name)
		params, _ = json.Marshal(p)
	}
	msg, err := g.agentRequest(r, t.agent, "tools/call", params, true)
	if err != nil {
		if r.ctx.Err() != nil {
			r.setOutcome(OutcomeCancelled, "client_gone")
			g.toolLog(r, name).Debug("client gone during an agent call")
			return answer{} // nobody to answer
		}
		return g.agentFailure(r, name, err)
	}
	g.debugCall(r, name, SourceAgent, start)
	if msg.Error != nil {
		r.setOutcome(OutcomeError, "agent_rpc_error")
		return agentRPCError(msg.Error)
	}
	if g.opts.Observer != nil {
		r.resultOutcome(msg.Result)
	}
	return result(msg.Result)
}

// agentToolOf finds the agent tool a call names (lookupAgentTool). A tool
// of an agent the token is not limited to is unknown to that token.
func (g *Gateway) agentToolOf(r *request, name string) (agentTool, bool, error) {
	t, ok, err := g.lookupAgentTool(r, name)
	if ok && !r.tok.AllowsAgent(t.agent) {
		return agentTool{}, false, nil
	}
	return t, ok, err
}

// lookupAgentTool finds the agent tool a call names in the context's tool
// list, fetched from the agents (a round trip) when it is not cached. The
// first call in a new context would cost two round trips; instead, when
// the last tool list any context got has the tool, the call goes straight
// to its agent, which refuses a tool it does not serve here (-32602). Only
// names some agent listed ever leave the gateway. A read-only token, whose
// check needs the context's own annotations, always waits for the list.
func (g *Gateway) lookupAgentTool(r *request, name string) (agentTool, bool, error) {
	if !r.tok.ReadOnly {
		if cat := g.catalogs.peek(r.bus, r.tok.Agents, g.opts.Agents.PresenceGeneration()); cat != nil {
			t, ok := cat.lookup(name)
			return t, ok, nil
		}
		// The latest list was built over every agent: it names tools as
		// this token sees them only if the token is not narrowed to some.
		if r.tok.Agents == nil {
			if t, ok := g.toolSets.lastListed(name); ok {
				return t, true, nil
			}
		}
	}
	cat, err := g.agentCatalog(r)
	if err != nil {
		return agentTool{}, false, err
	}
	t, ok := cat.lookup(name)
	return t, ok, nil
}

// didYouMean is the listed name of a tool the caller may use whose own
// name is name (an agent's tool qualified since another came, or dotted):
// what an unknown tool's error suggests. Only unknown tools pay for it.
func (g *Gateway) didYouMean(r *request, name string) string {
	cat, err := g.agentCatalog(r)
	if err != nil {
		return ""
	}
	return cat.suggest(name, r.tok.AllowsAgent)
}

// relay sends the interim message agent sent for an open call to the
// client.
func (g *Gateway) relay(r *request, agent string, m *jsonrpc.Message) {
	switch m.Method {
	case "notifications/progress":
	case "notifications/message":
		var p struct {
			Level string `json:"level"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if r.minLog < 0 || logLevelIndex(p.Level) < r.minLog {
			return
		}
	case "notifications/tools/list_changed":
		g.catalogs.invalidateAgent(r.bus, agent)
		g.notifyListChanged()
		return
	default:
		g.logger(r.ctx).WithField("method", m.Method).Debug("agent message not relayed")
		return
	}
	b, err := json.Marshal(m)
	if err == nil {
		r.out.send(b)
	}
}

// agentFailure answers a call the expert agents could not serve with a
// tool result that says what happened and what to do: the same shape every time.
func (g *Gateway) agentFailure(r *request, name string, err error) answer {
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		r.setOutcome(OutcomeError, "agent_rpc_error")
		return failure(rpcErr)
	}
	switch {
	case errors.Is(err, requester.ErrTimeout):
		r.setOutcome(OutcomeTimeout, "")
	case errors.Is(err, requester.ErrNoAgent):
		r.setOutcome(OutcomeError, "no_agent")
	case errors.Is(err, requester.ErrAgentGone):
		r.setOutcome(OutcomeError, "agent_gone")
	default:
		r.setOutcome(OutcomeError, "agent_unreachable")
	}
	var text string
	switch {
	case errors.Is(err, requester.ErrNoAgent):
		text = fmt.Sprintf("Tool %s is served by an expert agent, and no expert agent is online. Try again once one is connected; the platform tools still work.", name)
	case errors.Is(err, requester.ErrTimeout):
		text = fmt.Sprintf("The expert agent did not answer %s in time. The call was cancelled; try again, or with less work.", name)
	case errors.Is(err, requester.ErrAgentReconnected):
		text = fmt.Sprintf("The expert agent instance that %s was sent to lost its connection to the MQTT broker and came back without the call; try again.", name)
	case errors.Is(err, requester.ErrAgentGone):
		text = fmt.Sprintf("The expert agent that was running %s went offline before it answered; the tool may or may not have run. Other agents are online: try again.", name)
	case errors.Is(err, requester.ErrLinkLost):
		text = fmt.Sprintf("The gateway lost its connection to the MQTT broker while calling %s; the tool may or may not have run. Try again in a moment.", name)
	case errors.Is(err, requester.ErrClosed):
		text = fmt.Sprintf("The gateway is shutting down, and %s was cancelled. Try again in a moment (or through another gateway).", name)
	default:
		text = fmt.Sprintf("The expert agent could not be reached for %s (%v). Try again later.", name, err)
	}
	g.toolLog(r, name).WithError(err).Warn("agent tool call failed")
	b, _ := mcp.ErrorResult("%s", text).AppendJSON(nil)
	return result(b)
}

// UnionTool is one expert-agent tool of the union as a token sees it,
// with what an operator needs to understand its name.
type UnionTool struct {
	Name  string // as listed and called (exposed)
	Agent string // the agent that serves it (its name on the bus)
	// Served is the name the agent itself gives the tool.
	Served      string
	Title       string
	Description string
	// InputSchema is the schema as listed (an object schema; the agent's
	// own bytes, re-encoded once by the union). Untrusted, and shared by
	// every caller: read it, never change it.
	InputSchema json.RawMessage
	// Qualified says why Name is <agent>.<tool> (one of the Qualified…
	// reasons); "" when the tool keeps its own name.
	Qualified string
	// ReadOnly: annotated readOnlyHint (a read-only token may call it).
	ReadOnly bool
}

// UnionTools lists the expert agents' tools as tok sees them outside any
// session: the union of tools/list, with each tool's served name and why
// it is qualified. The console and the admin API read it; AgentTools is
// its short form for the platform API.
func (g *Gateway) UnionTools(ctx context.Context, tok store.Token) ([]UnionTool, error) {
	key := contract.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID, SessionID: "tok-" + tok.ID,
		EntityType: contract.NoEntity, EntityID: contract.NoEntity}
	cat, err := g.catalogs.get(ctx, key, tok.Agents, g.opts.Agents.PresenceGeneration(), func(ctx context.Context, stale *agentCatalog) (*agentCatalog, error) {
		return g.fetchCatalog(ctx, key, tok, stale, g.log)
	})
	if err != nil {
		return nil, err
	}
	out := make([]UnionTool, 0, len(cat.tools))
	for _, t := range cat.unionTools() {
		if tok.AllowsAgent(t.Agent) {
			out = append(out, t)
		}
	}
	return out, nil
}

// unionTools decodes the catalog's tools for UnionTools, once. The
// result is shared: callers copy the structs and never change what
// InputSchema holds.
func (cat *toolSet) unionTools() []UnionTool {
	cat.decodeOnce.Do(func() {
		cat.decoded = make([]UnionTool, len(cat.tools))
		for i, t := range cat.tools {
			var d struct {
				Title       string          `json:"title"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"inputSchema"`
			}
			_ = json.Unmarshal(t.raw, &d)
			cat.decoded[i] = UnionTool{Name: t.exposed, Agent: t.agent, Served: t.name, Title: d.Title, Description: d.Description,
				InputSchema: d.InputSchema, Qualified: t.why, ReadOnly: t.readOnly}
		}
	})
	return cat.decoded
}

// AgentTools lists the expert agents' tools as a token sees them outside
// any session (the platform API's GET /api/v1/agents).
func (g *Gateway) AgentTools(ctx context.Context, tok store.Token) ([]platformtools.AgentTool, error) {
	tools, err := g.UnionTools(ctx, tok)
	if err != nil {
		return nil, err
	}
	out := make([]platformtools.AgentTool, len(tools))
	for i, t := range tools {
		out[i] = platformtools.AgentTool{Name: t.Name, Agent: t.Agent, Title: t.Title, Description: t.Description}
	}
	return out, nil
}
