package admin

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

// Clients lists the MQTT clients connected to the embedded broker.
func (s *Service) Clients(context.Context) ([]MQTTClient, error) {
	if s.opts.Broker == nil {
		if s.opts.Requester == nil {
			return nil, ErrNoServer
		}
		return nil, ErrNoBroker
	}
	cls := s.opts.Broker.Clients()
	out := make([]MQTTClient, len(cls))
	for i, c := range cls {
		out[i] = NewMQTTClient(c)
	}
	return out, nil
}

// Agents lists the expert agent instances heard of (online first) and
// their tools as the caller's token sees them (the token in ctx, see
// store.WithToken; without one, no tools).
func (s *Service) Agents(ctx context.Context) (Agents, error) {
	if s.opts.Requester == nil {
		return Agents{}, ErrNoServer
	}
	out := Agents{Agents: []Agent{}, Tools: []AgentTool{}}
	for _, a := range s.opts.Requester.Agents() {
		out.Agents = append(out.Agents, Agent{Agent: a.Agent, ClientID: a.ClientID, Name: a.Name, Version: a.Version, Online: a.Online, Since: a.Since.UTC(),
			Unresponsive: a.Unresponsive, LastSeen: utcOrZero(a.LastHeard), IntervalSeconds: a.Interval.Seconds(), Connection: a.Connection})
	}
	sort.SliceStable(out.Agents, func(i, j int) bool {
		if out.Agents[i].Online != out.Agents[j].Online {
			return out.Agents[i].Online
		}
		if out.Agents[i].Agent != out.Agents[j].Agent {
			return out.Agents[i].Agent < out.Agents[j].Agent
		}
		return out.Agents[i].ClientID < out.Agents[j].ClientID
	})
	tok, _, ok := store.TokenFrom(ctx)
	if s.opts.AgentTools == nil || !ok {
		return out, nil
	}
	tctx, cancel := context.WithTimeout(ctx, s.opts.ToolsTimeout)
	tools, err := s.opts.AgentTools(tctx, tok)
	cancel()
	if err != nil {
		out.ToolsError = "the expert agents did not list their tools: " + err.Error()
		return out, nil
	}
	out.Tools = append(out.Tools, tools...)
	sort.Slice(out.Tools, func(i, j int) bool { return out.Tools[i].Name < out.Tools[j].Name })
	return out, nil
}

// Contexts lists the contexts the gateway holds a subscription for, of
// user ("" = every user), most recently used first.
func (s *Service) Contexts(_ context.Context, user string) ([]Context, error) {
	if s.opts.Requester == nil {
		return nil, ErrNoServer
	}
	now := time.Now()
	out := []Context{}
	for _, e := range s.opts.Requester.AllContexts() {
		if user == "" || e.UserID == user {
			out = append(out, newContext(e, now))
		}
	}
	return out, nil
}

// EvictContext drops the gateway's subscription of the context key
// ("platform/user/session/entityType/entityId") and waits for the
// unsubscribe. The context's next call subscribes again.
func (s *Service) EvictContext(ctx context.Context, key string) error {
	return s.change(ctx, "context.evict", "context "+key, func() error {
		if s.opts.Requester == nil {
			return ErrNoServer
		}
		c, err := ParseContextKey(key)
		if err != nil {
			return err
		}
		return s.opts.Requester.Evict(ctx, c)
	})
}

// ParseContextKey reads "platform/user/session/entityType/entityId" (as
// Context.Key writes it). Each part must be a valid topic level.
func ParseContextKey(key string) (contract.Context, error) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 {
		return contract.Context{}, invalid("context %q: want platform/user/session/entityType/entityId", key)
	}
	c := contract.Context{PlatformID: parts[0], UserID: parts[1], SessionID: parts[2], EntityType: parts[3], EntityID: parts[4]}
	if err := c.Validate(); err != nil {
		return contract.Context{}, invalid("%v", err)
	}
	return c, nil
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
