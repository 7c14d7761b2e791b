package requester

import (
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/jsonrpc"
)

// maxInterimQueued bounds the messages an agent may send ahead of the
// gateway's consumer for one call; the rest are dropped and counted, so a
// chatty agent cannot grow the gateway's memory without bound.
const maxInterimQueued = 1024

// recentCalls is how many calls back (by sequence number) the table
// remembers how a call ended, to tell a duplicate answer (a second agent
// instance answering) from a late one (an answer after the caller gave up).
const recentCalls = 4096

// pendingCall is one open request, waiting for its final response.
type pendingCall struct {
	id  string
	seq uint64 // the sequence number id was made from
	// agent is the agent the call went to, and replyKey the context's
	// part of its reply topics (contract.ReplyKey): a reply from another agent,
	// or on another context's topic, must not complete the call.
	agent    string
	replyKey string

	mu       sync.Mutex
	instance string // client ID of the instance that claimed the call (its first message)
	heard    bool   // a message of the call came from instance
	// sent is when a call addressed to an instance from the start was
	// sent (zero for the others): see Requester.suspectSilent.
	sent    time.Time
	interim []*jsonrpc.Message
	final   *jsonrpc.Message
	err     error
	// notify has room for one wake-up: the handler never blocks on it, the
	// waiter drains everything queued on each wake.
	notify chan struct{}
}

func newPendingCall(id string, seq uint64, agent, replyKey string) *pendingCall {
	return &pendingCall{id: id, seq: seq, agent: agent, replyKey: replyKey, notify: make(chan struct{}, 1)}
}

func (p *pendingCall) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// addInterim queues a message sent ahead of the final response. It reports
// false when the queue is full (the message is dropped).
func (p *pendingCall) addInterim(m *jsonrpc.Message) bool {
	p.mu.Lock()
	if p.final != nil || p.err != nil || len(p.interim) >= maxInterimQueued {
		p.mu.Unlock()
		return false
	}
	p.interim = append(p.interim, m)
	p.mu.Unlock()
	p.wake()
	return true
}

// finish records the final response or a failure; only the first counts.
func (p *pendingCall) finish(m *jsonrpc.Message, err error) bool {
	p.mu.Lock()
	if p.final != nil || p.err != nil {
		p.mu.Unlock()
		return false
	}
	p.final, p.err = m, err
	p.mu.Unlock()
	p.wake()
	return true
}

// take returns what arrived since the last take, in arrival order: interim
// messages first, then the final response or failure if there is one.
func (p *pendingCall) take() (interim []*jsonrpc.Message, final *jsonrpc.Message, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	interim, p.interim = p.interim, nil
	return interim, p.final, p.err
}

// replyKind classifies a reply by what the table knows of its correlation ID.
type replyKind uint8

const (
	replyPending   replyKind = iota + 1 // the call is open
	replyDuplicate                      // the call already had its final answer
	replyLate                           // the caller gave up, or the ID was never ours
)

// pendingTable maps correlation IDs to open calls, and remembers how the
// last recentCalls calls ended. That memory is an array indexed by sequence
// number rather than a map of IDs: every call writes it, and a map of
// thousands of strings costs a cache miss or two per write.
type pendingTable struct {
	// seqOf returns the sequence number a correlation ID of this table was
	// made from; false for an ID that is not one of them.
	seqOf func(id string) (uint64, bool)

	mu    sync.Mutex
	calls map[string]*pendingCall
	// recent[seq%recentCalls] is how the latest finished call whose
	// sequence number falls there ended.
	recent [recentCalls]finishedCall
}

// finishedCall is how call seq ended: answered if it got its final answer,
// not if it was abandoned (timeout, cancel, failure). Sequence numbers
// start at 1: the zero value matches no call.
type finishedCall struct {
	seq      uint64
	answered bool
}

func newPendingTable(seqOf func(id string) (uint64, bool)) *pendingTable {
	return &pendingTable{seqOf: seqOf, calls: make(map[string]*pendingCall)}
}

func (t *pendingTable) add(p *pendingCall) {
	t.mu.Lock()
	t.calls[p.id] = p
	t.mu.Unlock()
}

// lookup finds the open call of id.
func (t *pendingTable) lookup(id string) (*pendingCall, replyKind) {
	t.mu.Lock()
	p, ok := t.calls[id]
	t.mu.Unlock()
	if ok {
		return p, replyPending
	}
	if seq, ok := t.seqOf(id); ok {
		t.mu.Lock()
		f := t.recent[seq%recentCalls]
		t.mu.Unlock()
		if f.seq == seq && f.answered {
			return nil, replyDuplicate
		}
	}
	return nil, replyLate
}

// remove closes call p; answered says whether it got its final response.
// It reports whether the call was still open.
func (t *pendingTable) remove(p *pendingCall, answered bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	open := len(t.calls)
	delete(t.calls, p.id) // one map operation where a lookup and a delete would be two
	if len(t.calls) == open {
		return false
	}
	// A call that outlived recentCalls newer ones must not hide one of them.
	if f := &t.recent[p.seq%recentCalls]; f.seq < p.seq {
		*f = finishedCall{seq: p.seq, answered: answered}
	}
	return true
}

// claim records which instance of the call's agent took it; the first one
// heard of wins. It reports whether this was the first claim.
func (p *pendingCall) claim(instance string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.instance != "" {
		return false
	}
	p.instance = instance
	return true
}

// hear records a message of the call from instance: it claims the call if
// no instance has, and reports whether it did.
func (p *pendingCall) hear(instance string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	claimed := p.instance == ""
	if claimed {
		p.instance = instance
	}
	if p.instance == instance {
		p.heard = true
	}
	return claimed
}

// claimedBy returns the client ID of the instance that claimed the call,
// "" if none has yet.
func (p *pendingCall) claimedBy() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.instance
}

// failClaimed fails with err the open calls that the instance (an
// instanceKey) claimed.
func (t *pendingTable) failClaimed(key string, err error) int {
	return t.failWhere(func(p *pendingCall) bool {
		in := p.claimedBy()
		return in != "" && instanceKey(p.agent, in) == key
	}, err)
}

// failUnheard fails with err the open calls that went to the instance key
// (instanceKey) and from which it has sent nothing yet, and, with pool, the
// calls to its agent's pool that no instance has claimed.
//
// among, if not nil, narrows it to those calls (a snapshot taken earlier
// by unheard): a call made since has had no time to be heard of.
func (t *pendingTable) failUnheard(key string, pool bool, among map[*pendingCall]bool, err error) int {
	return t.failWhere(func(p *pendingCall) bool {
		return (among == nil || among[p]) && p.unheardBy(key, pool)
	}, err)
}

// unheard is the set of open calls failUnheard would fail now.
func (t *pendingTable) unheard(key string, pool bool) map[*pendingCall]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var set map[*pendingCall]bool
	for _, p := range t.calls {
		if p.unheardBy(key, pool) {
			if set == nil {
				set = make(map[*pendingCall]bool)
			}
			set[p] = true
		}
	}
	return set
}

// unheardBy reports whether the call went to the instance key and that
// instance has sent nothing of it, or (with pool) went to key's agent's
// pool and no instance has claimed it.
func (p *pendingCall) unheardBy(key string, pool bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.instance == "" {
		agent, _, _ := strings.Cut(key, "/") // names are levels: no "/" in them
		return pool && agent == p.agent
	}
	return !p.heard && instanceKey(p.agent, p.instance) == key
}

// lookAtInstances returns the instances (instanceKeys) that have sent
// nothing of an open call addressed to them before sentBefore, each with
// the latest such call's time, and those that have sent something of an
// open call: they are alive.
func (t *pendingTable) lookAtInstances(sentBefore time.Time) (silent map[string]time.Time, alive map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.calls {
		p.mu.Lock()
		in, heard, sent, done := p.instance, p.heard, p.sent, p.final != nil || p.err != nil
		p.mu.Unlock()
		switch {
		case in == "" || done:
		case heard:
			if alive == nil {
				alive = make(map[string]bool)
			}
			alive[instanceKey(p.agent, in)] = true
		case !sent.IsZero() && sent.Before(sentBefore):
			if silent == nil {
				silent = make(map[string]time.Time)
			}
			if key := instanceKey(p.agent, in); sent.After(silent[key]) {
				silent[key] = sent
			}
		}
	}
	return silent, alive
}

// failAgent fails with err the open calls that went to agent.
func (t *pendingTable) failAgent(agent string, err error) int {
	return t.failWhere(func(p *pendingCall) bool { return p.agent == agent }, err)
}

// failAll fails every open call with err (the calls stay in the table until
// their waiters remove them).
func (t *pendingTable) failAll(err error) int { return t.failWhere(nil, err) }

// failWhere fails with err the open calls that match (all when match is
// nil), finishing them outside the table's lock, and says how many it
// finished.
func (t *pendingTable) failWhere(match func(*pendingCall) bool, err error) int {
	t.mu.Lock()
	var calls []*pendingCall
	for _, p := range t.calls {
		if match == nil || match(p) {
			calls = append(calls, p)
		}
	}
	t.mu.Unlock()
	n := 0
	for _, p := range calls {
		if p.finish(nil, err) {
			n++
		}
	}
	return n
}

func (t *pendingTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls)
}
