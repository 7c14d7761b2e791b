package requester

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
)

// maxKnownAgents bounds the presence table. Agents with random client IDs
// leave an offline status behind at each restart; past the bound the oldest
// offline ones are forgotten.
const maxKnownAgents = 4096

// AgentStatus is what the gateway knows of one agent instance from its
// presence topic.
type AgentStatus struct {
	ClientID string
	Name     string
	Version  string
	Online   bool
	// Since is when the agent entered this status (its own clock if it said,
	// else when the gateway heard of it).
	Since time.Time
}

// presenceWatch keeps the agents' retained statuses.
type presenceWatch struct {
	mu     sync.Mutex
	agents map[string]AgentStatus
	online int
	// changed is closed and replaced at every change, so waiters can wait
	// for "something changed" without a callback.
	changed chan struct{}
	// gen counts changes, so that caches of agent-provided data (tool
	// lists) can tell that the agents they were built from changed.
	gen uint64
}

func newPresenceWatch() *presenceWatch {
	return &presenceWatch{agents: make(map[string]AgentStatus), changed: make(chan struct{})}
}

// presenceClientID extracts <clientId> from ff/v1/mcp/agents/<clientId>/status.
// The topic is the authority (the broker lets an agent publish only its
// own), not the clientId in the payload.
func presenceClientID(topic string) (string, bool) {
	rest, ok := strings.CutPrefix(topic, contract.TopicPrefix+"agents/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/status")
	if !ok || !acl.ValidLevel(id) {
		return "", false
	}
	return id, true
}

// handle applies one presence message. It reports whether the message was
// understood and whether it took the last online agent away.
func (w *presenceWatch) handle(topic string, payload []byte, now time.Time) (ok, lastGone bool, gone string) {
	id, ok := presenceClientID(topic)
	if !ok {
		return false, false, ""
	}
	var st AgentStatus
	cleared := len(payload) == 0
	if !cleared {
		var p contract.Presence
		if err := json.Unmarshal(payload, &p); err != nil {
			return false, false, ""
		}
		if p.Status != contract.StatusOnline && p.Status != contract.StatusOffline {
			return false, false, ""
		}
		st = AgentStatus{ClientID: id, Name: p.Name, Version: p.Version, Online: p.Status == contract.StatusOnline, Since: now}
		if p.Since > 0 {
			st.Since = time.UnixMilli(p.Since)
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.online
	if old, had := w.agents[id]; had && old.Online {
		w.online--
		if cleared || !st.Online {
			gone = id
		}
	}
	if cleared {
		delete(w.agents, id)
	} else {
		w.agents[id] = st
		if st.Online {
			w.online++
		}
		if len(w.agents) > maxKnownAgents {
			w.forgetOldestOffline()
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.gen++
	return true, before > 0 && w.online == 0, gone
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

// anyOnline reports whether an agent is online, and a channel closed at the
// next change.
func (w *presenceWatch) anyOnline() (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.online > 0, w.changed
}

// generation counts the presence changes seen so far.
func (w *presenceWatch) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// list returns the known agents, online first, then by client ID.
func (w *presenceWatch) list() []AgentStatus {
	w.mu.Lock()
	out := make([]AgentStatus, 0, len(w.agents))
	for _, a := range w.agents {
		out = append(out, a)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Online != out[j].Online {
			return out[i].Online
		}
		return out[i].ClientID < out[j].ClientID
	})
	return out
}
