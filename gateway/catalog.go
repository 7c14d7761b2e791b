package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/singleflight"

	"github.com/toolbus/toolbus/contract"
)

// AgentSeparator joins an agent's name and a tool name. A platform tool
// keeps its name; an agent's tool is listed as <agent>.<tool> when its
// name holds the separator, when a platform tool has its name, when an
// agent online since earlier lists it too (NamesQualifyOnCollision), or
// always (NamesAlwaysQualify). Agent names are topic levels
// ([A-Za-z0-9_-]), so the first '.' is where the agent's name ends: a
// dotted name always reads as its own agent's, and no agent, online now
// or later, can list a name that reads as another's. A tool whose listed
// name is taken (by a platform tool) or over MCP's 128 characters is left
// out (and logged). <agent>.<tool> also calls a tool listed under its
// plain name, so that a name a client once saw keeps working when the
// agent that had the plain name goes.
const AgentSeparator = "."

// How agent tools are named (Options.AgentToolNames).
const (
	// NamesQualifyOnCollision lists an agent's tool under its plain name
	// unless an agent online since earlier (requester AgentOnlineSince),
	// among those the caller's token may use, lists the same name: a
	// tool keeps its name while its agent stays online, and the newcomer's
	// is qualified. Names are short, and stable under a running client;
	// which agent has a plain name depends on who came first.
	NamesQualifyOnCollision = "qualify-on-collision"
	// NamesAlwaysQualify lists every agent tool as <agent>.<tool>: names
	// depend on nothing but the agent, at the cost of longer names and
	// of renaming every tool of a gateway that ran with the default.
	NamesAlwaysQualify = "always-qualify"
)

// MetaAgent is the _meta member of every agent tool as listed: the name of
// the agent that serves it.
const MetaAgent = "io.toolbus/agent"

// Defaults of the bounds on one agent's tools/list answer in a context
// (Options.MaxAgentTools, MaxAgentListBytes, MaxToolBytes): generous for
// agents and bridged servers, small enough that an agent cannot make the
// gateway hold or log without bound. What they leave out is logged once
// per answer and counted (Stats.AgentToolsLeftOut).
const (
	DefaultMaxAgentTools     = 1000
	DefaultMaxAgentListBytes = 2 << 20
	DefaultMaxToolBytes      = 64 << 10
)

// toolNameRE is MCP's rule for tool names.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// agentTool is one expert-agent tool as the gateway lists and routes it.
type agentTool struct {
	agent    string          // the agent that serves it (its name on the bus)
	exposed  string          // the name clients see and call
	name     string          // the name the agent knows
	readOnly bool            // annotations.readOnlyHint
	raw      json.RawMessage // the Tool object listed to clients
	// why says why exposed is <agent>.<tool> (a Qualified… reason); "" when
	// the tool is listed under its own name.
	why string
}

// Why an agent tool is listed as <agent>.<tool> (UnionTool.Qualified).
const (
	QualifiedAlways       = "every agent tool is qualified (agent tool names: always-qualify)"
	QualifiedSeparator    = "its name holds the separator \".\""
	QualifiedPlatformName = "a platform tool has the name"
	QualifiedEarlierAgent = "an agent online since earlier lists the same name"
)

// agentCatalog is the union of the expert agents' tools for one context,
// and the answers of each agent it was built from. It is never changed
// once cached: a newer one replaces it.
type agentCatalog struct {
	*toolSet
	gen uint64 // presence generation it was checked at
	// agents are the agents the token it was built for may use
	// (store.Token.Agents, nil: all): its names are worked out over those,
	// so a token whose list changed (a user's grants) needs another.
	agents []string
	// fetched is when its oldest answer was fetched: it is stale a TTL
	// after that.
	fetched time.Time
	// partial: an agent did not answer; the catalog is built again
	// after partialTTL rather than the full TTL, so that the agent's tools
	// come back soon after it answers again.
	partial bool
	// answers are the agents' answers it holds, by agent: when presence
	// changes, the answers of the agents whose own presence did not are
	// used again, and only the others are asked.
	answers []agentAnswer
	// stale: an agent said its list changed (invalidateAgent); the
	// catalog serves only as the stale one of the next build.
	stale bool
}

// agentAnswer is one agent's tools/list answer in a context.
type agentAnswer struct {
	list    *agentList
	gen     uint64 // the agent's own presence generation when it was asked
	fetched time.Time
}

// partialTTL is how long a union that lacks a silent agent's tools is
// reused.
const partialTTL = 2 * time.Second

// toolSet is a tool list as built from one tools/list answer. It is never
// changed once built, so the contexts whose agents gave the same answer
// (usually all of them) share one (see toolSets).
type toolSet struct {
	tools  []agentTool // by exposed name
	byName map[string]int

	// decoded is tools as UnionTools reads them, decoded once on first
	// use: the console's pages read thousands of tools at every view.
	// (In the set, which catalogs share by pointer, not in a catalog,
	// which is copied.)
	decodeOnce sync.Once
	decoded    []UnionTool
}

func (c *toolSet) lookup(exposed string) (agentTool, bool) {
	i, ok := c.byName[exposed]
	if !ok {
		return agentTool{}, false
	}
	return c.tools[i], true
}

// catalogs caches agent tool lists per context: fetched once, shared by the
// concurrent requests that need it, stale after ttl or when agent presence
// changes (an agent came or went, maybe with other tools).
type catalogs struct {
	ttl   time.Duration
	cache *lru.Cache[contract.Context, *agentCatalog]
	group singleflight.Group
	now   func() time.Time
}

func newCatalogs(size int, ttl time.Duration) *catalogs {
	c, err := lru.New[contract.Context, *agentCatalog](size)
	if err != nil {
		panic(err) // size is validated by New
	}
	return &catalogs{ttl: ttl, cache: c, now: time.Now}
}

// get returns the catalog of a context, building it when missing or stale.
// build gets the stale catalog (nil if none), whose answers it may use
// again.
func (cs *catalogs) get(ctx context.Context, key contract.Context, agents []string, gen uint64, build func(ctx context.Context, stale *agentCatalog) (*agentCatalog, error)) (*agentCatalog, error) {
	stale, ok := cs.cache.Get(key)
	if ok && cs.fresh(stale, agents, gen) {
		return stale, nil
	}
	v, err, _ := cs.group.Do(key.Levels(), func() (any, error) {
		c, err := build(ctx, stale)
		if err != nil {
			return nil, err
		}
		c.gen, c.agents = gen, agents
		cs.cache.Add(key, c)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*agentCatalog), nil
}

// peek returns the context's catalog if one is cached and fresh, without
// fetching; nil otherwise.
func (cs *catalogs) peek(key contract.Context, agents []string, gen uint64) *agentCatalog {
	if c, ok := cs.cache.Peek(key); ok && cs.fresh(c, agents, gen) {
		return c
	}
	return nil
}

func (cs *catalogs) fresh(c *agentCatalog, agents []string, gen uint64) bool {
	ttl := cs.ttl
	if c.partial {
		ttl = min(ttl, partialTTL)
	}
	return !c.stale && c.gen == gen && sameAgents(c.agents, agents) && cs.now().Sub(c.fetched) < ttl
}

// sameAgents reports whether two tokens' agent lists allow the same
// agents: nil (every agent) is not an empty list (none). Unnarrowed
// tokens, nearly all, cost two nil checks.
func sameAgents(a, b []string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return slices.Equal(a, b)
}

// reusable reports whether an answer of a stale catalog may serve again:
// its agent's own presence did not change since, and its TTL has not
// passed.
func (cs *catalogs) reusable(a agentAnswer, agentGen uint64) bool {
	return a.gen == agentGen && cs.now().Sub(a.fetched) < cs.ttl
}

// invalidateAgent makes a context's catalog stale without agent's
// answer (the agent said its list changed): the next build asks that
// agent again and uses the others' answers again, so that one agent's
// notifications cost the others nothing. A catalog is never changed once
// cached: a copy replaces it.
func (cs *catalogs) invalidateAgent(key contract.Context, agent string) {
	c, ok := cs.cache.Peek(key)
	if !ok {
		return
	}
	cut := *c
	cut.stale = true
	cut.answers = slices.DeleteFunc(slices.Clone(c.answers), func(a agentAnswer) bool { return a.list.agent == agent })
	// Should a build cache a catalog between Peek and Add, the copy
	// replaces it: stale too, it costs one more build, no wrong answer.
	cs.cache.Add(key, &cut)
}

// agentGenerations is an AgentRequester that tells each agent's presence
// changes apart (*requester.Requester): the answers of agents that did not
// change are used again when another one comes, goes or churns. Without
// it every presence change makes every agent's answer stale.
type agentGenerations interface {
	AgentGeneration(agent string) uint64
}

// agentGeneration is the presence generation of agent's own latest change.
func (g *Gateway) agentGeneration(agent string) uint64 {
	if ag, ok := g.opts.Agents.(agentGenerations); ok {
		return ag.AgentGeneration(agent)
	}
	return g.opts.Agents.PresenceGeneration()
}

// maxToolPages bounds how many pages of an agent's tools/list are followed.
const maxToolPages = 100

// agentPages are the pages of one agent's tools/list answer.
type agentPages struct {
	agent string
	pages []json.RawMessage
	// cut: the answer had more pages, not fetched (the byte or page
	// bound was reached).
	cut bool
}

// listLimits bound what is kept of one agent's answer.
type listLimits struct {
	tools     int // tools kept
	bytes     int // bytes of the kept tools, all pages together
	toolBytes int // bytes of one tool definition
}

// limits are the bounds of Options, defaults applied.
func (g *Gateway) toolListLimits() listLimits {
	orDefault := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return listLimits{
		tools:     orDefault(g.opts.MaxAgentTools, DefaultMaxAgentTools),
		bytes:     orDefault(g.opts.MaxAgentListBytes, DefaultMaxAgentListBytes),
		toolBytes: orDefault(g.opts.MaxToolBytes, DefaultMaxToolBytes),
	}
}

// Reasons an agent's tool is left out, as Stats.AgentToolsLeftOut counts them.
const (
	LeftOutInvalidName = "invalid_name" // not ^[A-Za-z0-9_.-]{1,128}$
	LeftOutDuplicate   = "duplicate"    // listed twice by its agent
	LeftOutTooLarge    = "too_large"    // its definition is over MaxToolBytes
	LeftOutTooMany     = "too_many"     // past MaxAgentTools, or MaxAgentListBytes
	LeftOutNameTaken   = "name_taken"   // its listed name is a platform tool's, or over 128 characters
	// LeftOutPages counts answers whose further pages were not fetched
	// (past MaxAgentListBytes, or maxToolPages): their tools are unknown.
	LeftOutPages = "pages_not_fetched"
)

// leftOut is what one answer (or one union) left out: counted by reason,
// a few names kept to say which.
type leftOut struct {
	counts   map[string]int
	examples []string
}

// maxLeftOutExamples bounds the names one summary log line gives.
const maxLeftOutExamples = 3

func (l *leftOut) add(reason, name string) {
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[reason]++
	if len(l.examples) < maxLeftOutExamples {
		l.examples = append(l.examples, clip(name))
	}
}

func (l *leftOut) empty() bool { return len(l.counts) == 0 }

// fields are the summary's log fields.
func (l *leftOut) fields() logrus.Fields {
	f := logrus.Fields{"examples": l.examples}
	for r, n := range l.counts {
		f[r] = n
	}
	return f
}

// agentList is what the gateway keeps of one agent's answer: its valid
// tools, within the bounds, in the order listed. It is never changed once
// built, and the contexts that got the very same answer share one
// (toolSets.agentList).
type agentList struct {
	id    uint64 // unique: the key of the unions built from it
	agent string
	tools []listedTool
	left  leftOut
}

// listedTool is one tool of an agent's answer, before naming.
type listedTool struct {
	name string
	raw  json.RawMessage // the Tool object as the agent listed it
}

// decodeAgentList keeps the valid tools of an agent's answer, within lim.
// An answer that is not a tools/list result is an error.
func decodeAgentList(a agentPages, lim listLimits) (*agentList, error) {
	l := &agentList{agent: a.agent}
	seen := map[string]bool{}
	bytes := 0
	for _, page := range a.pages {
		var res struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(page, &res); err != nil {
			return nil, fmt.Errorf("agent %s: tools/list result: %w", a.agent, err)
		}
		for _, raw := range res.Tools {
			var t struct {
				Name json.RawMessage `json:"name"`
			}
			var name string
			if json.Unmarshal(raw, &t) != nil || json.Unmarshal(t.Name, &name) != nil || !toolNameRE.MatchString(name) {
				l.left.add(LeftOutInvalidName, string(t.Name))
				continue
			}
			switch {
			case seen[name]:
				l.left.add(LeftOutDuplicate, name)
				continue
			case len(raw) > lim.toolBytes:
				l.left.add(LeftOutTooLarge, name)
				continue
			case len(l.tools) >= lim.tools || bytes+len(raw) > lim.bytes:
				l.left.add(LeftOutTooMany, name)
				continue
			}
			seen[name] = true
			bytes += len(raw)
			l.tools = append(l.tools, listedTool{name: name, raw: raw})
		}
	}
	if a.cut {
		if l.left.counts == nil {
			l.left.counts = map[string]int{}
		}
		l.left.counts[LeftOutPages]++
	}
	return l, nil
}

// buildUnion turns the agents' lists, the agent online longest first
// (fetchCatalog), into the union clients see: each tool under its own
// name when it has no AgentSeparator, no platform tool has it, no earlier
// list has it and always is false; else as <agent>.<tool>. So a tool
// keeps its name while its agent stays online: a newcomer that lists it
// too is the one qualified. Every tool says its agent in _meta
// (MetaAgent), and gets what MCP clients need (a description, an object
// inputSchema). The same lists in the same order always give the same
// names. A tool listed plainly is also found as <agent>.<tool> (lookup
// only). It also returns what it left out (names taken).
func buildUnion(lists []*agentList, taken func(name string) bool, always bool) (*toolSet, leftOut) {
	first := map[string]string{} // tool name -> the first agent (in order) to list it
	for _, l := range lists {
		for _, lt := range l.tools {
			if _, ok := first[lt.name]; !ok {
				first[lt.name] = l.agent
			}
		}
	}
	c := &toolSet{byName: map[string]int{}}
	var left leftOut
	for _, l := range lists {
		for _, lt := range l.tools {
			name := lt.name
			exposed := name
			var why string
			switch {
			case always:
				why = QualifiedAlways
			case strings.Contains(name, AgentSeparator):
				why = QualifiedSeparator
			case taken(name):
				why = QualifiedPlatformName
			case first[name] != l.agent:
				why = QualifiedEarlierAgent + " (" + first[name] + ")"
			}
			if why != "" {
				exposed = l.agent + AgentSeparator + name
			}
			// exposed is unique among agents by construction (a dotted
			// name starts with its own agent's); the check keeps it so
			// should the rule change.
			if _, dup := c.byName[exposed]; dup || taken(exposed) || len(exposed) > 128 {
				left.add(LeftOutNameTaken, exposed)
				continue
			}
			t := map[string]json.RawMessage{}
			if err := json.Unmarshal(lt.raw, &t); err != nil {
				continue // decoded once already: cannot fail
			}
			if exposed != name {
				t["name"], _ = json.Marshal(exposed)
			}
			if !hasText(t["description"]) {
				t["description"], _ = json.Marshal("Tool " + name + " of the expert agent " + l.agent + ".")
			}
			if !objectSchema(t["inputSchema"]) {
				t["inputSchema"] = json.RawMessage(`{"type":"object"}`)
			}
			t["_meta"] = withAgentMeta(t["_meta"], l.agent)
			var ann struct {
				ReadOnly bool `json:"readOnlyHint"`
			}
			if len(t["annotations"]) > 0 {
				_ = json.Unmarshal(t["annotations"], &ann) // malformed annotations: not read-only
			}
			raw, err := json.Marshal(t)
			if err != nil {
				continue // members are valid JSON: cannot fail
			}
			c.byName[exposed] = len(c.tools)
			c.tools = append(c.tools, agentTool{agent: l.agent, exposed: exposed, name: name, readOnly: ann.ReadOnly, raw: raw, why: why})
		}
	}
	sort.Slice(c.tools, func(i, j int) bool { return c.tools[i].exposed < c.tools[j].exposed })
	for i, t := range c.tools {
		c.byName[t.exposed] = i
	}
	// The qualified name of a tool listed plainly reaches it too: it is no
	// other tool's (a qualified name starts with its own agent's), and a
	// client that saw it while another agent had the plain name keeps it.
	for i, t := range c.tools {
		if t.exposed != t.name {
			continue
		}
		alias := t.agent + AgentSeparator + t.name
		if _, dup := c.byName[alias]; !dup && !taken(alias) && len(alias) <= 128 {
			c.byName[alias] = i
		}
	}
	return c, left
}

// suggest returns the listed name of a tool whose own name is name (the
// first by listed name), for an unknown tool's error; "" if none.
// allowed filters the agents the caller may use.
func (c *toolSet) suggest(name string, allowed func(agent string) bool) string {
	for _, t := range c.tools {
		if t.name == name && t.exposed != name && allowed(t.agent) {
			return t.exposed
		}
	}
	return ""
}

// withAgentMeta returns a tool's _meta object with MetaAgent set to agent
// (what the agent put there kept, but for that member).
func withAgentMeta(meta json.RawMessage, agent string) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 {
		_ = json.Unmarshal(meta, &m) // not an object: replaced
	}
	m[MetaAgent], _ = json.Marshal(agent)
	b, _ := json.Marshal(m)
	return b
}

func hasText(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s != ""
}

func objectSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(raw, &s) == nil && s.Type == "object"
}

// gatewayStats are the endpoint's own counters.
type gatewayStats struct {
	mu             sync.Mutex
	refusals       map[string]uint64
	agentListFails uint64
	leftOut        map[string]uint64 // agent tools left out, by reason (LeftOut...)
	agentLists     uint64            // tools/list answers asked of agents
}

func (s *gatewayStats) addLeftOut(l leftOut) {
	if l.empty() {
		return
	}
	s.mu.Lock()
	if s.leftOut == nil {
		s.leftOut = map[string]uint64{}
	}
	for r, n := range l.counts {
		s.leftOut[r] += uint64(n)
	}
	s.mu.Unlock()
}

func (s *gatewayStats) agentListAsked() {
	s.mu.Lock()
	s.agentLists++
	s.mu.Unlock()
}

func (s *gatewayStats) refused(reason string) {
	s.mu.Lock()
	if s.refusals == nil {
		s.refusals = map[string]uint64{}
	}
	s.refusals[reason]++
	s.mu.Unlock()
}

func (s *gatewayStats) agentListFailed() {
	s.mu.Lock()
	s.agentListFails++
	s.mu.Unlock()
}
