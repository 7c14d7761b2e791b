package requester

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/clip"
)

// OfflineForgotten is how long an instance that went offline is still
// listed (Requester.Agents): a day, enough to see what stopped overnight.
const OfflineForgotten = 24 * time.Hour

// maxKnownAgents bounds the presence table. Agents with random client IDs
// leave an offline status behind at each restart; past the bound the oldest
// offline ones are forgotten.
const maxKnownAgents = 4096

// MaxPresenceBytes bounds a presence payload: a status is a few short
// members, so a larger one is not a status (it is ignored and counted,
// Stats.PresenceTooLarge). An external broker lets an agent leave retained
// messages of any size on its status topic, under as many client IDs as it
// likes: the requester keeps nothing of them.
const MaxPresenceBytes = 4 << 10

// MaxPresenceText bounds the name and the version an instance's status
// gives, in bytes: longer ones are cut when kept. They are shown to
// operators, never parsed.
const MaxPresenceText = 128

// DefaultMaxInstancesPerAgent is Options.MaxInstancesPerAgent's default.
const DefaultMaxInstancesPerAgent = 1024

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
	// Unresponsive: with Options.AddressInstances, the instance left a
	// call addressed to it unanswered and unclaimed for
	// Options.SuspectAfter. New calls go to the agent's other instances
	// until it is heard from.
	Unresponsive bool
	// LastHeard is when the gateway last heard a status of the instance
	// (zero if never, as for one known only from its claims), Interval how
	// often it said it would repeat an online status (0: never), Connection
	// the connection it named (contract.Presence.Connection; "" if none).
	// What an operator needs to tell a quiet instance from a dead one.
	LastHeard  time.Time
	Interval   time.Duration
	Connection string
}

// instanceKey names an instance in the presence table and in claims:
// agent/clientID (client IDs of different agents may meet).
func instanceKey(agent, clientID string) string { return agent + "/" + clientID }

// presenceWatch keeps the agent instances' statuses.
type presenceWatch struct {
	mu     sync.Mutex
	agents map[string]AgentStatus // by instanceKey
	online map[string]int         // online instances by agent name
	heard  map[string]heard       // by instanceKey, for the instances in agents
	// suspect holds the online instances taken for unresponsive
	// (markSuspect), by instanceKey, until they are heard from.
	suspect map[string]bool
	// changed is closed and replaced at every change, so waiters can wait
	// for "something changed" without a callback.
	changed chan struct{}
	// gen counts changes, so that caches of agent-provided data (tool
	// lists) can tell that the agents they were built from changed.
	gen uint64
	// agentGen is, by agent, the gen of the latest change of one of its
	// instances: a cache of one agent's data is stale only when its own
	// entry moves, whatever the churn of other agents. Values come from
	// gen, so they are never reused, even by an agent forgotten and back.
	agentGen map[string]uint64
	// known holds the instances in agents by agent (their instanceKeys):
	// what maxInstances bounds, and where admit looks for one to give up
	// without scanning the whole table.
	known map[string]map[string]struct{}
	// maxInstances bounds known per agent (Options.MaxInstancesPerAgent);
	// 0: no bound.
	maxInstances int
	// refusing holds the agents that reached maxInstances and were refused
	// an instance since they last were admitted one, or lost one: the
	// refusal is logged once per such episode, not once per message.
	refusing map[string]bool
	// onlineSince is, by online agent, since when it has been online
	// without a break (rankOf): an agent's tools keep their plain names
	// against agents online since later (the gateway's union). Deleted
	// when the agent's last instance goes.
	onlineSince map[string]int64
	// trustUntil ends the moment after the presence subscription is made
	// (Start, and each reconnect of the link) in which statuses are the
	// broker's retained ones, of instances online before this gateway
	// heard: their own since is all there is to order them by.
	trustUntil time.Time
}

// RankSlack is how far before the moment a gateway hears an agent come
// online its own since may place it (rankOf): the time its status takes
// to arrive, and clocks a little apart. An agent cannot claim to have
// been online long before it came, and so take the plain names of the
// tools of agents that were.
const RankSlack = time.Second

// heard is what the expiry and the staleness checks need of an instance's
// latest status.
type heard struct {
	stated   int64         // the status's own since (Unix ms); 0 if it said none
	at       time.Time     // when it arrived
	interval time.Duration // how often it said it would repeat an online status; 0 = never
	conn     string        // its connection (contract.Presence.Connection); "" if it said none
	rank     int64         // since when its agent is online, if it is the first instance online (rankOf)
}

func newPresenceWatch() *presenceWatch {
	return &presenceWatch{agents: make(map[string]AgentStatus), online: make(map[string]int),
		heard: make(map[string]heard), suspect: make(map[string]bool), changed: make(chan struct{}),
		agentGen: make(map[string]uint64), known: make(map[string]map[string]struct{}), refusing: make(map[string]bool),
		onlineSince: make(map[string]int64)}
}

// presenceChange is what one presence message changed.
type presenceChange struct {
	// agentGone is the agent whose last online instance went; "" if none.
	agentGone string
	// instanceGone is the instanceKey of an instance that went offline.
	instanceGone string
	// instanceReconnected is the instanceKey of an online instance that
	// announced a new connection, and reconnectedAlone says it is its
	// agent's only online instance.
	instanceReconnected string
	reconnectedAlone    bool
	// tooLarge: the payload was over MaxPresenceBytes and was ignored.
	tooLarge bool
	// refused is the agent that was refused a new instance (it has
	// maxInstances already), and refusedFirst says it is the first
	// refusal since it was last admitted one (to be logged).
	refused      string
	refusedFirst bool
}

// handle applies one presence message. It reports whether the message was
// understood, and what went.
func (w *presenceWatch) handle(topic string, payload []byte, now time.Time) (presenceChange, bool) {
	agent, clientID, ok := contract.ParsePresenceTopic(topic)
	if !ok {
		return presenceChange{}, false
	}
	if len(payload) > MaxPresenceBytes {
		return presenceChange{tooLarge: true}, true
	}
	key := instanceKey(agent, clientID)
	var st AgentStatus
	var h heard
	cleared := len(payload) == 0
	if !cleared {
		var p contract.Presence
		if err := json.Unmarshal(payload, &p); err != nil {
			return presenceChange{}, false
		}
		if p.Status != contract.StatusOnline && p.Status != contract.StatusOffline {
			return presenceChange{}, false
		}
		st = AgentStatus{Agent: agent, ClientID: clientID, Name: clipText(p.Name), Version: clipText(p.Version),
			Online: p.Status == contract.StatusOnline, Since: now}
		if p.Since > 0 {
			st.Since = time.UnixMilli(p.Since)
		}
		h = heard{stated: p.Since, at: now, interval: time.Duration(max(p.Interval, 0)) * time.Millisecond, conn: p.Connection}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	h.rank = w.rankOf(h.stated, now)
	old, had := w.agents[key]
	if !had && !cleared && !w.admit(agent) {
		first := !w.refusing[agent]
		w.refusing[agent] = true
		return presenceChange{refused: agent, refusedFirst: first}, true
	}
	if !cleared && had && h.stated > 0 && w.heard[key].stated > h.stated {
		// Older than the status held (a replay, from another broker node
		// say): the newer one wins.
		return presenceChange{}, true
	}
	delete(w.suspect, key) // heard from: whatever it says, it is not silent
	if !cleared && had && old.Online == st.Online && old.Name == st.Name && old.Version == st.Version &&
		h.stated == w.heard[key].stated && h.stated != 0 && h.conn == w.heard[key].conn {
		// A repeat (the same since: a new since says the agent changed,
		// its tools perhaps): nothing changed that anyone waits on.
		w.agents[key], w.heard[key] = st, h
		return presenceChange{}, true
	}
	return w.apply(key, agent, st, h, cleared), true
}

// apply records a status that changes something (cleared: the instance
// is forgotten) and wakes those who wait for changes.
func (w *presenceWatch) apply(key, agent string, st AgentStatus, h heard, cleared bool) presenceChange {
	var ch presenceChange
	// The agent's rank outlives the instance's own change (its count goes
	// down and up again) while any instance stays online.
	rank, ranked := w.onlineSince[agent]
	if old, had := w.agents[key]; had && old.Online {
		w.setOnline(agent, -1)
		if cleared || !st.Online {
			ch.instanceGone = key
		} else if prev := w.heard[key].conn; prev != "" && h.conn != "" && prev != h.conn {
			ch.instanceReconnected = key
		}
	}
	if !st.Online {
		delete(w.suspect, key)
	}
	if cleared {
		w.forget(key)
	} else {
		if _, had := w.agents[key]; !had {
			if w.known[agent] == nil {
				w.known[agent] = map[string]struct{}{}
			}
			w.known[agent][key] = struct{}{}
		}
		w.agents[key], w.heard[key] = st, h
		if st.Online {
			w.setOnline(agent, +1)
		}
		if len(w.agents) > maxKnownAgents {
			w.forgetOldestOffline()
		}
	}
	if w.online[agent] > 0 {
		if st.Online && !cleared && (!ranked || h.rank < rank) {
			rank, ranked = h.rank, true
		}
		if ranked {
			w.onlineSince[agent] = rank
		}
	}
	if ch.instanceGone != "" && w.online[agent] == 0 {
		ch.agentGone = agent
	}
	if ch.instanceReconnected != "" {
		ch.reconnectedAlone = w.online[agent] == 1
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.gen++
	if len(w.known[agent]) > 0 {
		w.agentGen[agent] = w.gen
	}
	return ch
}

// admit reports whether a new instance of agent may enter the table: it
// may while the agent has fewer than maxInstances there, and otherwise
// takes the place of the agent's offline instance heard of longest ago.
// An agent whose instances are all online at the bound is refused more:
// with a broker that keeps retained statuses of any client ID (external
// brokers), one identity could otherwise fill the table, and the
// operator's list, with phantoms that never send a Will. Called with mu
// held. A refusal, what a flood of such statuses meets, costs no scan;
// an admission at the bound scans the agent's own instances only.
func (w *presenceWatch) admit(agent string) bool {
	mine := w.known[agent]
	if w.maxInstances <= 0 || len(mine) < w.maxInstances {
		delete(w.refusing, agent)
		return true
	}
	if w.online[agent] >= len(mine) {
		return false // all online: none to give up
	}
	var oldest string
	var at time.Time
	for key := range mine {
		if a := w.agents[key]; !a.Online && (oldest == "" || a.Since.Before(at)) {
			oldest, at = key, a.Since
		}
	}
	if oldest == "" {
		return false
	}
	w.forget(oldest)
	delete(w.refusing, agent)
	return true
}

// forget drops an instance from the table (offline, or cleared). Called
// with mu held.
func (w *presenceWatch) forget(key string) {
	a, ok := w.agents[key]
	if !ok {
		return
	}
	delete(w.agents, key)
	delete(w.heard, key)
	// Below its bound now: its next refusal is a new episode, and an
	// agent forgotten leaves nothing behind.
	delete(w.refusing, a.Agent)
	delete(w.known[a.Agent], key)
	if len(w.known[a.Agent]) == 0 {
		delete(w.known, a.Agent)
		delete(w.agentGen, a.Agent)
	}
}

// clipText cuts s to MaxPresenceText bytes, on a rune boundary.
func clipText(s string) string { return clip.String(s, MaxPresenceText) }

// expire takes offline, as their Will would, the online instances that
// promised to repeat their status and have been silent for
// contract.ExpiryIntervals of their intervals: a broker node that dies
// sends no Will for the clients it held.
func (w *presenceWatch) expire(now time.Time) []presenceChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []presenceChange
	for key, st := range w.agents {
		h := w.heard[key]
		if !st.Online || h.interval <= 0 || now.Sub(h.at) <= contract.ExpiryIntervals*h.interval {
			continue
		}
		st.Online, st.Since = false, now
		out = append(out, w.apply(key, st.Agent, st, heard{at: now}, false))
	}
	return out
}

func (w *presenceWatch) setOnline(agent string, delta int) {
	if n := w.online[agent] + delta; n > 0 {
		w.online[agent] = n
	} else {
		delete(w.online, agent)
		delete(w.onlineSince, agent)
	}
}

// rankOf is the since an instance's status gives its agent, should the
// agent come online with it (Unix ms): the status's own since (the same
// on every gateway), but no earlier than RankSlack before the gateway
// heard it, unless it came while retained statuses arrive (trustUntil).
// A status without since counts from when it was heard. Called with mu
// held.
func (w *presenceWatch) rankOf(stated int64, now time.Time) int64 {
	heard := now.UnixMilli()
	switch {
	case stated <= 0:
		return heard
	case now.Before(w.trustUntil):
		return stated
	default:
		return max(stated, heard-RankSlack.Milliseconds())
	}
}

// trustRetained opens the moment, until end, in which statuses are taken
// for the broker's retained ones (rankOf).
func (w *presenceWatch) trustRetained(end time.Time) {
	w.mu.Lock()
	w.trustUntil = end
	w.mu.Unlock()
}

// agentOnlineSince is since when agent has been online without a break
// (rankOf); false if it is not online.
func (w *presenceWatch) agentOnlineSince(agent string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ms, ok := w.onlineSince[agent]
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
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
		w.forget(oldest)
	}
}

// agentOnline reports whether an instance of agent is online, and a
// channel closed at the next change.
func (w *presenceWatch) agentOnline(agent string) (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.online[agent] > 0, w.changed
}

// instanceOnline reports whether instance clientID of agent is online.
func (w *presenceWatch) instanceOnline(agent, clientID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agents[instanceKey(agent, clientID)].Online
}

// pickInstance returns the n-th (mod their number) online instance of
// agent, by client ID, leaving out the suspect ones unless all are; false
// if none is online.
func (w *presenceWatch) pickInstance(agent string, n uint64) (string, bool) {
	w.mu.Lock()
	var ids, healthy []string
	for key, st := range w.agents {
		if st.Online && st.Agent == agent {
			ids = append(ids, st.ClientID)
			if !w.suspect[key] {
				healthy = append(healthy, st.ClientID)
			}
		}
	}
	w.mu.Unlock()
	if len(healthy) > 0 {
		ids = healthy
	}
	if len(ids) == 0 {
		return "", false
	}
	sort.Strings(ids)
	return ids[n%uint64(len(ids))], true
}

// markSuspect takes for unresponsive the online instances of silent
// (instanceKeys, each with the latest call it left unheard) whose status
// is older than that call: a status since says it is alive, its call lost
// perhaps. The instances of alive are unresponsive no more. It returns
// the instances newly taken for unresponsive.
func (w *presenceWatch) markSuspect(silent map[string]time.Time, alive map[string]bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range alive {
		delete(w.suspect, key)
	}
	var fresh []string
	for key, sent := range silent {
		if w.agents[key].Online && !w.suspect[key] && w.heard[key].at.Before(sent) {
			w.suspect[key] = true
			fresh = append(fresh, key)
		}
	}
	return fresh
}

// onlineInstances returns the client IDs of agent's online instances,
// sorted.
func (w *presenceWatch) onlineInstances(agent string) []string {
	w.mu.Lock()
	var ids []string
	for _, st := range w.agents {
		if st.Online && st.Agent == agent {
			ids = append(ids, st.ClientID)
		}
	}
	w.mu.Unlock()
	sort.Strings(ids)
	return ids
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

// agentGeneration is the generation of the latest change of one of
// agent's instances; 0 if none is known.
func (w *presenceWatch) agentGeneration(agent string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agentGen[agent]
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
			w.forget(key)
			continue
		}
		a.Unresponsive = w.suspect[key]
		if h, ok := w.heard[key]; ok {
			a.LastHeard, a.Interval, a.Connection = h.at, h.interval, h.conn
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
