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

// AgentToolPrefix is put before the name of an expert-agent tool whose name
// is taken by a platform tool: the platform tool keeps its name, the agent's
// is listed and called as AgentToolPrefix+name. An agent tool whose prefixed
// name is taken too is left out (and logged).
const AgentToolPrefix = "agent_"

// toolNameRE is MCP's rule for tool names.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// agentTool is one expert-agent tool as the gateway lists and routes it.
type agentTool struct {
	exposed  string          // the name clients see and call
	name     string          // the name the agent knows
	readOnly bool            // annotations.readOnlyHint
	raw      json.RawMessage // the Tool object listed to clients
}

// agentCatalog is the tool list of the expert agents for one context.
type agentCatalog struct {
	*toolSet
	gen     uint64 // presence generation it was fetched at
	fetched time.Time
}

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
	if c, ok := cs.cache.Get(key); ok && c.gen == gen && cs.now().Sub(c.fetched) < cs.ttl {
		return c, nil
	}
	v, err, _ := cs.group.Do(key.ResponseTopic(), func() (any, error) {
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
	if c, ok := cs.cache.Peek(key); ok && c.gen == gen && cs.now().Sub(c.fetched) < cs.ttl {
		return c
	}
	return nil
}

// invalidate drops a context's catalog (the agent said its list changed).
func (cs *catalogs) invalidate(key contract.Context) { cs.cache.Remove(key) }

// maxToolPages bounds how many pages of an agent's tools/list are followed.
const maxToolPages = 100

// buildCatalog turns an agent's tools/list results into a catalog, renaming
// tools whose names platform tools hold and filling what MCP clients need
// (a description, an object inputSchema).
func buildCatalog(pages []json.RawMessage, taken func(name string) bool, warn func(msg string, args ...any)) (*toolSet, error) {
	c := &toolSet{byName: map[string]int{}}
	for _, page := range pages {
		var res struct {
			Tools []map[string]json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(page, &res); err != nil {
			return nil, fmt.Errorf("agent tools/list result: %w", err)
		}
		for _, t := range res.Tools {
			var name string
			if err := json.Unmarshal(t["name"], &name); err != nil || !toolNameRE.MatchString(name) {
				warn("agent tool with an invalid name left out", "name", string(t["name"]))
				continue
			}
			exposed := name
			if taken(name) {
				exposed = AgentToolPrefix + name
			}
			if _, dup := c.byName[exposed]; dup || taken(exposed) || len(exposed) > 128 {
				warn("agent tool left out: its name is taken", "name", name, "exposed", exposed)
				continue
			}
			if exposed != name {
				t["name"], _ = json.Marshal(exposed)
			}
			if !hasText(t["description"]) {
				t["description"], _ = json.Marshal("Tool " + name + " of the expert agent.")
			}
			if !objectSchema(t["inputSchema"]) {
				t["inputSchema"] = json.RawMessage(`{"type":"object"}`)
			}
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
			c.tools = append(c.tools, agentTool{exposed: exposed, name: name, readOnly: ann.ReadOnly, raw: raw})
		}
	}
	sort.Slice(c.tools, func(i, j int) bool { return c.tools[i].exposed < c.tools[j].exposed })
	for i, t := range c.tools {
		c.byName[t.exposed] = i
	}
	return c, nil
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
