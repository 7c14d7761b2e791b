package requester

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/toolbus/toolbus/contract"
)

// OfflineForgotten is how long an instance that went offline is still
// listed (Requester.Agents): a day, enough to see what stopped overnight.
const OfflineForgotten = 24 * time.Hour

// maxKnownAgents bounds the presence table. Agents with random client IDs
// leave an offline status behind at each restart; past the bound the oldest
// offline ones are forgotten.
const maxKnownAgents = 4096

// AgentStatus is what the gateway knows of one agent instance from its
// presence topic.
type AgentStatus struct {
	// Agent is the agent's name on the bus (its MQTT username), ClientID
	// the instance's: both from the presence topic, which the broker lets
	// an instance publish only as itself.
	Agent    string
	ClientID string
	Name     string
	Version  string
	Online   bool
	// Since is when the agent entered this status (its own clock if it said,
	// else when the gateway heard of it).
	Since time.Time
}

// instanceKey names an instance in the presence table and in claims:
// agent/clientID (client IDs of different agents may meet).
func instanceKey(agent, clientID string) string { return agent + "/" + clientID }

// presenceWatch keeps the agent instances' statuses.
type presenceWatch struct {
	mu     sync.Mutex
	agents map[string]AgentStatus // by instanceKey
	online map[string]int         // online instances by agent name
	// changed is closed and replaced at every change, so waiters can wait
	// for "something changed" without a callback.
	changed chan struct{}
	// gen counts changes, so that caches of agent-provided data (tool
	// lists) can tell that the agents they were built from changed.
	gen uint64
}

func newPresenceWatch() *presenceWatch {
	return &presenceWatch{agents: make(map[string]AgentStatus), online: make(map[string]int), changed: make(chan struct{})}
}

// presenceChange is what one presence message changed.
type presenceChange struct {
	// agentGone is the agent whose last online instance went; "" if none.
	agentGone string
	// instanceGone is the instanceKey of an instance that went offline.
	instanceGone string
}

// handle applies one presence message. It reports whether the message was
// understood, and what went.
func (w *presenceWatch) handle(topic string, payload []byte, now time.Time) (presenceChange, bool) {
	agent, clientID, ok := contract.ParsePresenceTopic(topic)
	if !ok {
		return presenceChange{}, false
	}
	key := instanceKey(agent, clientID)
	var st AgentStatus
	cleared := len(payload) == 0
	if !cleared {
		var p contract.Presence
		if err := json.Unmarshal(payload, &p); err != nil {
			return presenceChange{}, false
		}
		if p.Status != contract.StatusOnline && p.Status != contract.StatusOffline {
			return presenceChange{}, false
		}
		st = AgentStatus{Agent: agent, ClientID: clientID, Name: p.Name, Version: p.Version, Online: p.Status == contract.StatusOnline, Since: now}
		if p.Since > 0 {
			st.Since = time.UnixMilli(p.Since)
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	var ch presenceChange
	if old, had := w.agents[key]; had && old.Online {
		w.setOnline(agent, -1)
		if cleared || !st.Online {
			ch.instanceGone = key
		}
	}
	if cleared {
		delete(w.agents, key)
	} else {
		w.agents[key] = st
		if st.Online {
			w.setOnline(agent, +1)
		}
		if len(w.agents) > maxKnownAgents {
			w.forgetOldestOffline()
		}
	}
	if ch.instanceGone != "" && w.online[agent] == 0 {
		ch.agentGone = agent
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.gen++
	return ch, true
}

func (w *presenceWatch) setOnline(agent string, delta int) {
	if n := w.online[agent] + delta; n > 0 {
		w.online[agent] = n
	} else {
		delete(w.online, agent)
	}
}

// forgetOldestOffline drops the offline agent heard of longest ago. Called
// with mu held, only past maxKnownAgents, so the scan is rare.
func (w *presenceWatch) forgetOldestOffline() {
	var oldest string
	var at time.Time
	for id, a := range w.agents {
		if !a.Online && (oldest == "" || a.Since.Before(at)) {
			oldest, at = id, a.Since
		}
	}
	if oldest != "" {
		delete(w.agents, oldest)
	}
}

// agentOnline reports whether an instance of agent is online, and a
// channel closed at the next change.
func (w *presenceWatch) agentOnline(agent string) (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.online[agent] > 0, w.changed
}

// onlineAgents returns the names of the agents with an instance online,
// sorted, and a channel closed at the next change.
func (w *presenceWatch) onlineAgents() ([]string, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, 0, len(w.online))
	for a := range w.online {
		names = append(names, a)
	}
	sort.Strings(names)
	return names, w.changed
}

// generation counts the presence changes seen so far.
func (w *presenceWatch) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// list returns the known agent instances, online first, then by agent and
// client ID.
// Instances offline for longer than OfflineForgotten are forgotten there:
// an operator's list does not keep every instance that ever ran.
func (w *presenceWatch) list(now time.Time) []AgentStatus {
	w.mu.Lock()
	out := make([]AgentStatus, 0, len(w.agents))
	for key, a := range w.agents {
		if !a.Online && now.Sub(a.Since) > OfflineForgotten {
			delete(w.agents, key)
			continue
		}
		out = append(out, a)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Online != out[j].Online {
			return out[i].Online
		}
		if out[i].Agent != out[j].Agent {
			return out[i].Agent < out[j].Agent
		}
		return out[i].ClientID < out[j].ClientID
	})
	return out
}
