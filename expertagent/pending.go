package expertagent

import (
	"sync"

	"github.com/toolbus/toolbus/jsonrpc"
)

// maxInterimQueued bounds the messages an agent may send ahead of the
// gateway's consumer for one call; the rest are dropped and counted, so a
// chatty agent cannot grow the gateway's memory without bound.
const maxInterimQueued = 1024

// recentCalls is how many finished correlation IDs the table remembers, to
// tell a duplicate answer (a second agent instance answering) from a late
// one (an answer after the caller gave up).
const recentCalls = 4096

// pendingCall is one open request, waiting for its final response.
type pendingCall struct {
	id string
	// topic is the response topic the answer must arrive on: a reply on
	// another context's topic must not complete the call.
	topic string

	mu      sync.Mutex
	interim []*jsonrpc.Message
	final   *jsonrpc.Message
	err     error
	// notify has room for one wake-up: the handler never blocks on it, the
	// waiter drains everything queued on each wake.
	notify chan struct{}
}

func newPendingCall(id, topic string) *pendingCall {
	return &pendingCall{id: id, topic: topic, notify: make(chan struct{}, 1)}
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

// pendingTable maps correlation IDs to open calls.
type pendingTable struct {
	mu    sync.Mutex
	calls map[string]*pendingCall
	// ring of recently finished IDs; recentDone[id] is true if the call got
	// its final answer, false if it was abandoned (timeout, cancel, failure).
	ring       [recentCalls]string
	ringNext   int
	recentDone map[string]bool
}

func newPendingTable() *pendingTable {
	return &pendingTable{calls: make(map[string]*pendingCall), recentDone: make(map[string]bool)}
}

func (t *pendingTable) add(p *pendingCall) {
	t.mu.Lock()
	t.calls[p.id] = p
	t.mu.Unlock()
}

// lookup finds the open call of id.
func (t *pendingTable) lookup(id string) (*pendingCall, replyKind) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.calls[id]; ok {
		return p, replyPending
	}
	if done, ok := t.recentDone[id]; ok && done {
		return nil, replyDuplicate
	}
	return nil, replyLate
}

// remove closes the call of id; answered says whether it got its final
// response. It reports whether the call was still open.
func (t *pendingTable) remove(id string, answered bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.calls[id]; !ok {
		return false
	}
	delete(t.calls, id)
	if old := t.ring[t.ringNext]; old != "" {
		delete(t.recentDone, old)
	}
	t.ring[t.ringNext] = id
	t.ringNext = (t.ringNext + 1) % recentCalls
	t.recentDone[id] = answered
	return true
}

// failAll fails every open call with err (the calls stay in the table until
// their waiters remove them).
func (t *pendingTable) failAll(err error) int {
	t.mu.Lock()
	calls := make([]*pendingCall, 0, len(t.calls))
	for _, p := range t.calls {
		calls = append(calls, p)
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
