package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
)

// The methods other than tools that several agents serve: lists are the
// union of every online agent's answer; a read, a get, a completion or a
// subscription goes to the one agent that listed the resource, template or
// prompt it names. With one agent online, everything passes through as it
// did before there were several (pagination included).

// owners says which agent serves what in one context, from the agents'
// last list answers there.
type owners struct {
	mu        sync.Mutex        // guards the maps: written while a list is merged
	resources map[string]string // uri -> agent
	templates []ownedTemplate   // in agent order
	prompts   map[string]ownedName
	gen       uint64
	fetched   time.Time
}

type ownedTemplate struct {
	prefix string // the template up to its first '{'
	agent  string
}

type ownedName struct {
	agent, name string // the agent, and the name it knows
}

// ownerCache keeps the owners of recent contexts.
type ownerCache struct {
	mu    sync.Mutex
	cache *lru.Cache[contract.Context, *owners]
}

func newOwnerCache(size int) *ownerCache {
	c, err := lru.New[contract.Context, *owners](size)
	if err != nil {
		panic(err) // size is validated by New
	}
	return &ownerCache{cache: c}
}

// listOf is the list method whose answers say who owns what a routed
// method names.
var listOf = map[string][]string{
	"resources/read":        {"resources/list", "resources/templates/list"},
	"resources/subscribe":   {"resources/list", "resources/templates/list"},
	"resources/unsubscribe": {"resources/list", "resources/templates/list"},
	"prompts/get":           {"prompts/list"},
	"completion/complete":   {"prompts/list", "resources/templates/list"},
}

// fanOut sends one request to every agent, concurrently, and returns each
// agent's message or error, in agents' order.
func (g *Gateway) fanOut(r *request, agents []string, method string, params json.RawMessage) ([]*jsonrpc.Message, []error) {
	msgs := make([]*jsonrpc.Message, len(agents))
	errs := make([]error, len(agents))
	ctx, cancel := context.WithTimeout(r.ctx, g.opts.ListTimeout)
	defer cancel()
	sub := *r
	sub.ctx = ctx
	// The agents' notifications reach the client from as many goroutines:
	// one at a time on its stream.
	sub.out = &lockedStream{s: r.out}
	if r.sess != nil {
		// What agentRequest does per request, done once for all of them: the
		// client's cancellation ends every one, and they learn its
		// capabilities.
		key := string(r.id)
		r.sess.setInflight(key, cancel)
		defer r.sess.setInflight(key, nil)
		if caps := r.sess.caps; len(caps) > 0 {
			params = withMeta(params, metaClientCapabilities, caps)
		}
		sub.sess = nil
	}
	var wg sync.WaitGroup
	for i, agent := range agents {
		wg.Go(func() {
			msgs[i], errs[i] = g.agentRequest(&sub, agent, method, params, false)
			if errs[i] == nil && msgs[i].Error != nil {
				errs[i] = msgs[i].Error
			}
		})
	}
	wg.Wait()
	return msgs, errs
}

// mergeList serves a list method with several agents online: the union of
// their first pages (an agent that fails is left out and logged), the
// owners of what they list recorded for the routed methods.
func (g *Gateway) mergeList(r *request, m agentMethod, agents []string) answer {
	msgs, errs := g.fanOut(r, agents, r.method, r.params)
	type listed struct {
		agent string
		item  map[string]json.RawMessage
	}
	var all []listed
	holders := map[string]int{} // prompt name -> how many agents list it
	for i, agent := range agents {
		if errs[i] != nil {
			var rpcErr *jsonrpc.Error
			if errors.As(errs[i], &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound {
				continue // an agent with tools only need not serve the other lists
			}
			g.stats.agentListFailed()
			g.logger(r.ctx).WithError(errs[i]).WithField("agent", agent).Warn(r.method + " without this agent")
			continue
		}
		var res map[string][]map[string]json.RawMessage
		if err := json.Unmarshal(msgs[i].Result, &res); err != nil {
			g.logger(r.ctx).WithError(err).WithField("agent", agent).Warn(r.method + ": the agent's answer is not a list")
			continue
		}
		named := map[string]bool{}
		for _, it := range res[m.list] {
			all = append(all, listed{agent, it})
			var name string
			if json.Unmarshal(it["name"], &name) == nil && !named[name] {
				named[name] = true
				holders[name]++
			}
		}
	}
	items := make([]json.RawMessage, 0, len(all))
	seen := map[string]bool{}
	o := g.ownersOf(r)
	for _, l := range all {
		key, exposed := g.own(o, r.method, l.agent, l.item, holders)
		if key == "" || seen[key] {
			continue
		}
		seen[key] = true
		if exposed != "" {
			l.item["name"], _ = json.Marshal(exposed)
		}
		l.item["_meta"] = withAgentMeta(l.item["_meta"], l.agent)
		if b, err := json.Marshal(l.item); err == nil {
			items = append(items, b)
		}
	}
	out, _ := json.Marshal(map[string][]json.RawMessage{m.list: items})
	return passResult(r, m, out)
}

// own records who owns one listed item and returns its key in the union
// ("" to leave it out) and, for a prompt whose name another agent holds
// too (holders), or that holds AgentSeparator, the name it is listed
// under: <agent>.<prompt>, as tools.
func (g *Gateway) own(o *owners, method, agent string, it map[string]json.RawMessage, holders map[string]int) (key, exposed string) {
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(it[k], &s)
		return s
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch method {
	case "resources/list":
		uri := str("uri")
		if uri == "" {
			return "", ""
		}
		if _, taken := o.resources[uri]; !taken {
			o.resources[uri] = agent
		} else if o.resources[uri] != agent {
			return "", "" // the first agent (by name) listing a URI serves it
		}
		return uri, ""
	case "resources/templates/list":
		tpl := str("uriTemplate")
		if tpl == "" {
			return "", ""
		}
		prefix, _, _ := strings.Cut(tpl, "{")
		if t := (ownedTemplate{prefix: prefix, agent: agent}); !slices.Contains(o.templates, t) {
			o.templates = append(o.templates, t)
		}
		return agent + " " + tpl, ""
	case "prompts/list":
		name := str("name")
		if name == "" {
			return "", ""
		}
		listed := name
		// As for tools: a dotted name is its own agent's, so that no agent
		// lists a name that reads as another's <agent>.<prompt>.
		if holders[name] > 1 || strings.Contains(name, AgentSeparator) {
			listed = agent + AgentSeparator + name
		}
		o.prompts[listed] = ownedName{agent: agent, name: name}
		if listed != name {
			return listed, listed
		}
		return listed, ""
	}
	return agent + " " + str("name") + str("uri"), ""
}

// ownersOf returns the context's owners, new when the agents changed or
// the record is older than the tool list TTL.
func (g *Gateway) ownersOf(r *request) *owners {
	gen := g.opts.Agents.PresenceGeneration()
	g.owners.mu.Lock()
	defer g.owners.mu.Unlock()
	if o, ok := g.owners.cache.Get(r.bus); ok && o.gen == gen && time.Since(o.fetched) < g.opts.ToolListTTL {
		return o
	}
	o := &owners{resources: map[string]string{}, prompts: map[string]ownedName{}, gen: gen, fetched: time.Now()}
	g.owners.cache.Add(r.bus, o)
	return o
}

// routeOf finds the agent that serves what a routed method names, and the
// params to send it (a prompt's listed name turned back into its own).
// ok is false when no agent listed it.
func (g *Gateway) routeOf(r *request, o *owners) (agent string, params json.RawMessage, ok bool) {
	var p struct {
		URI  string `json:"uri"`
		Name string `json:"name"`
		Ref  struct {
			Type string `json:"type"`
			URI  string `json:"uri"`
			Name string `json:"name"`
		} `json:"ref"`
	}
	_ = json.Unmarshal(r.params, &p)
	o.mu.Lock()
	defer o.mu.Unlock()
	byURI := func(uri string) (string, bool) {
		if a, ok := o.resources[uri]; ok {
			return a, true
		}
		best, agent := -1, ""
		for _, t := range o.templates {
			if strings.HasPrefix(uri, t.prefix) && len(t.prefix) > best {
				best, agent = len(t.prefix), t.agent
			}
		}
		return agent, best >= 0
	}
	byPrompt := func(name string) (ownedName, bool) {
		n, ok := o.prompts[name]
		return n, ok
	}
	switch r.method {
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		a, ok := byURI(p.URI)
		return a, r.params, ok
	case "prompts/get":
		n, ok := byPrompt(p.Name)
		if !ok {
			return "", nil, false
		}
		return n.agent, renamed(r.params, "name", p.Name, n.name), true
	case "completion/complete":
		if p.Ref.Type == "ref/prompt" {
			n, ok := byPrompt(p.Ref.Name)
			if !ok {
				return "", nil, false
			}
			params := r.params
			if n.name != p.Ref.Name {
				var m map[string]json.RawMessage
				if json.Unmarshal(r.params, &m) == nil {
					m["ref"] = renamed(m["ref"], "name", p.Ref.Name, n.name)
					params, _ = json.Marshal(m)
				}
			}
			return n.agent, params, true
		}
		a, ok := byURI(p.Ref.URI)
		return a, r.params, ok
	}
	return "", nil, false
}

// renamed returns obj with its string member key set to to, when it was from.
func renamed(obj json.RawMessage, key, from, to string) json.RawMessage {
	if from == to {
		return obj
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return obj
	}
	m[key], _ = json.Marshal(to)
	b, _ := json.Marshal(m)
	return b
}

// route serves a routed method with several agents online: to the agent
// that listed what it names, asking the agents for their lists first when
// this context has not seen them.
func (g *Gateway) route(r *request, m agentMethod, agents []string) answer {
	o := g.ownersOf(r)
	agent, params, ok := g.routeOf(r, o)
	if !ok {
		for _, list := range listOf[r.method] {
			lr := *r
			lr.method, lr.params = list, nil
			g.mergeList(&lr, agentMethods[list], agents)
		}
		agent, params, ok = g.routeOf(r, o)
	}
	if !ok {
		return invalidParams("no expert agent lists what %s names", r.method)
	}
	msg, err := g.agentRequest(r, agent, r.method, params, m.mrtr)
	if err != nil {
		if r.ctx.Err() != nil {
			return answer{}
		}
		return g.agentError(r, err)
	}
	if msg.Error != nil {
		return agentRPCError(msg.Error)
	}
	return passResult(r, m, msg.Result)
}

// lockedStream lets several goroutines send on one request's stream.
type lockedStream struct {
	mu sync.Mutex
	s  stream
}

func (l *lockedStream) open() bool { return l.s.open() }

func (l *lockedStream) send(msg []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.send(msg)
}
