package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/toolbus/toolbus/contract"
)

// AgentSeparator joins an agent's name and a tool name, when a name is
// held by more than one source: a platform tool keeps its name, and each
// agent's tool of that name is listed and called as <agent>.<tool>. Agent
// names are topic levels ([A-Za-z0-9_-]), so the first '.' is where the
// agent's name ends. A tool whose qualified name is taken too, or over
// MCP's 128 characters, is left out (and logged).
const AgentSeparator = "."

// MetaAgent is the _meta member of every agent tool as listed: the name of
// the agent that serves it.
const MetaAgent = "io.toolbus/agent"

// toolNameRE is MCP's rule for tool names.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// agentTool is one expert-agent tool as the gateway lists and routes it.
type agentTool struct {
	agent    string          // the agent that serves it (its name on the bus)
	exposed  string          // the name clients see and call
	name     string          // the name the agent knows
	readOnly bool            // annotations.readOnlyHint
	raw      json.RawMessage // the Tool object listed to clients
}

// agentCatalog is the union of the expert agents' tools for one context.
type agentCatalog struct {
	*toolSet
	gen     uint64 // presence generation it was fetched at
	fetched time.Time
	// partial: an agent did not answer; the catalog is fetched again
	// after partialTTL rather than the full TTL, so that the agent's tools
	// come back soon after it answers again.
	partial bool
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

// get returns the catalog of a context, fetching it when missing or stale.
func (cs *catalogs) get(ctx context.Context, key contract.Context, gen uint64, fetch func(context.Context) (*agentCatalog, error)) (*agentCatalog, error) {
	if c, ok := cs.cache.Get(key); ok && cs.fresh(c, gen) {
		return c, nil
	}
	v, err, _ := cs.group.Do(key.Levels(), func() (any, error) {
		c, err := fetch(ctx)
		if err != nil {
			return nil, err
		}
		c.gen, c.fetched = gen, cs.now()
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
func (cs *catalogs) peek(key contract.Context, gen uint64) *agentCatalog {
	if c, ok := cs.cache.Peek(key); ok && cs.fresh(c, gen) {
		return c
	}
	return nil
}

func (cs *catalogs) fresh(c *agentCatalog, gen uint64) bool {
	ttl := cs.ttl
	if c.partial {
		ttl = min(ttl, partialTTL)
	}
	return c.gen == gen && cs.now().Sub(c.fetched) < ttl
}

// invalidate drops a context's catalog (the agent said its list changed).
func (cs *catalogs) invalidate(key contract.Context) { cs.cache.Remove(key) }

// maxToolPages bounds how many pages of an agent's tools/list are followed.
const maxToolPages = 100

// agentPages are the pages of one agent's tools/list answer.
type agentPages struct {
	agent string
	pages []json.RawMessage
}

// listedTool is one tool of an agent's answer, before naming.
type listedTool struct {
	agent string
	name  string
	obj   map[string]json.RawMessage
}

// buildCatalog turns the agents' tools/list results (sorted by agent) into
// the union clients see: each tool under its own name when no other source
// holds that name, else as <agent>.<tool> (AgentSeparator); every tool
// says its agent in _meta (MetaAgent), and gets what MCP clients need (a
// description, an object inputSchema). The same answers always give the
// same names.
func buildCatalog(answers []agentPages, taken func(name string) bool, warn func(msg string, args ...any)) (*toolSet, error) {
	var listed []listedTool
	holders := map[string]int{} // tool name -> how many agents list it
	for _, a := range answers {
		seen := map[string]bool{}
		for _, page := range a.pages {
			var res struct {
				Tools []map[string]json.RawMessage `json:"tools"`
			}
			if err := json.Unmarshal(page, &res); err != nil {
				return nil, fmt.Errorf("agent %s: tools/list result: %w", a.agent, err)
			}
			for _, t := range res.Tools {
				var name string
				if err := json.Unmarshal(t["name"], &name); err != nil || !toolNameRE.MatchString(name) {
					warn("agent tool with an invalid name left out", "agent", a.agent, "name", string(t["name"]))
					continue
				}
				if seen[name] {
					warn("agent tool listed twice by its agent: the second left out", "agent", a.agent, "name", name)
					continue
				}
				seen[name] = true
				holders[name]++
				listed = append(listed, listedTool{agent: a.agent, name: name, obj: t})
			}
		}
	}

	c := &toolSet{byName: map[string]int{}}
	for _, lt := range listed {
		t, name := lt.obj, lt.name
		exposed := name
		if taken(name) || holders[name] > 1 {
			exposed = lt.agent + AgentSeparator + name
		}
		if _, dup := c.byName[exposed]; dup || taken(exposed) || len(exposed) > 128 {
			warn("agent tool left out: its name is taken", "agent", lt.agent, "name", name, "exposed", exposed)
			continue
		}
		if exposed != name {
			t["name"], _ = json.Marshal(exposed)
		}
		if !hasText(t["description"]) {
			t["description"], _ = json.Marshal("Tool " + name + " of the expert agent " + lt.agent + ".")
		}
		if !objectSchema(t["inputSchema"]) {
			t["inputSchema"] = json.RawMessage(`{"type":"object"}`)
		}
		t["_meta"] = withAgentMeta(t["_meta"], lt.agent)
		var ann struct {
			ReadOnly bool `json:"readOnlyHint"`
		}
		if len(t["annotations"]) > 0 {
			_ = json.Unmarshal(t["annotations"], &ann) // malformed annotations: not read-only
		}
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		c.byName[exposed] = len(c.tools)
		c.tools = append(c.tools, agentTool{agent: lt.agent, exposed: exposed, name: name, readOnly: ann.ReadOnly, raw: raw})
	}
	sort.Slice(c.tools, func(i, j int) bool { return c.tools[i].exposed < c.tools[j].exposed })
	for i, t := range c.tools {
		c.byName[t.exposed] = i
	}
	return c, nil
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
