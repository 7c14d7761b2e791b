package requester

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/jsonrpc"
)

var (
	// ErrNoAgent is returned when no instance of the agent a request goes
	// to is online, and to its calls still waiting when its last instance
	// goes offline.
	ErrNoAgent = errors.New("no expert agent online")
	// ErrAgentGone is returned to a call whose expert agent (the one that
	// claimed it, see ClaimMethod) went offline before answering, while
	// other agents stay online.
	ErrAgentGone = errors.New("the expert agent serving the call went offline")
	// ErrAgentReconnected is returned to a call whose expert agent instance
	// announced a new connection to the broker before it said anything of
	// the call: the request reached the broker while the instance was
	// cut off (its broker node died, say), and no one will answer it. It
	// matches ErrAgentGone.
	ErrAgentReconnected = fmt.Errorf("the expert agent instance serving the call reconnected to the broker without it: %w", ErrAgentGone)
	// ErrTimeout is returned when a request's deadline passes before the
	// agent's final answer arrives. Such errors also match
	// context.DeadlineExceeded.
	ErrTimeout = errors.New("expert agent did not answer in time")
	// ErrClosed is returned by a closed Requester, and to calls still
	// waiting when it closes.
	ErrClosed = errors.New("requester closed")
	// ErrNoCall is returned by Send when no call with that correlation ID
	// is open in that context.
	ErrNoCall = errors.New("no open call with this correlation id in this context")
	// ErrNotStarted is returned by Request before Start.
	ErrNotStarted = errors.New("requester not started")
)

// Defaults of Options.
const (
	DefaultCallTimeout  = 30 * time.Second
	DefaultListTimeout  = 5 * time.Second
	DefaultMaxContexts  = 10000
	DefaultContextTTL   = 24 * time.Hour
	DefaultSuspectAfter = 2 * time.Second
)

// presenceGrace is how long after Start a request with no agent in sight
// waits for retained presence to arrive: over an external broker the
// retained statuses come after the SUBACK, not with it.
const presenceGrace = 500 * time.Millisecond

// cancelPublishTimeout bounds the notifications/cancelled publish that
// follows a timeout or a cancellation.
const cancelPublishTimeout = 2 * time.Second

// Options configures a Requester. The zero value is usable.
type Options struct {
	// CallTimeout is the deadline of a request unless ctx has an earlier
	// one; 0 means DefaultCallTimeout (30s).
	CallTimeout time.Duration
	// ListTimeout is the deadline of tools/list; 0 means DefaultListTimeout (5s).
	ListTimeout time.Duration
	// MaxContexts bounds the subscription LRU; 0 means DefaultMaxContexts
	// (10000). Contexts with calls in flight are kept beyond the bound
	// until their calls end.
	MaxContexts int
	// ContextTTL is the idle time after which a context's subscription is
	// dropped; every use extends it. 0 means DefaultContextTTL (24h).
	ContextTTL time.Duration
	// AddressInstances sends each request to one online instance of the
	// agent, chosen in turn from presence, instead of to the pool ("_")
	// for the broker's shared subscription to pick: for brokers without
	// $share (NATS, RabbitMQ treat it as a literal topic). The instance
	// holds the call from the start, so its loss fails the call at once.
	AddressInstances bool
	// SuspectAfter, with AddressInstances: an instance that has neither
	// answered nor claimed a call addressed to it for this long (between
	// one and two times it) gets no new calls while the agent has other
	// instances, until it is heard from: a status (a call it left unheard
	// before its latest status does not count), or an answer or claim. An instance whose node died sends
	// no Will and is taken for gone only after three presence intervals;
	// meanwhile it would get its share of the calls, each waiting for its
	// deadline. The agent SDK claims a call it runs after its ClaimAfter
	// (250 ms by default): keep SuspectAfter well above it. 0 means
	// DefaultSuspectAfter (2s); negative: never.
	SuspectAfter time.Duration
	// IgnorePresence: when false, a call to an agent with no instance
	// online fails at once with ErrNoAgent, and its waiting calls fail when
	// its last instance goes.
	IgnorePresence bool
	// MaxInstancesPerAgent bounds the instances of one agent that presence
	// keeps (online or offline): past it, an offline one is forgotten to
	// make room, and while all are online a new instance is not admitted
	// (logged once, counted in Stats.InstancesRefused; its calls go to the
	// others). It bounds what one agent identity can make the gateway hold
	// with retained statuses under client IDs of its own choosing. 0 means
	// DefaultMaxInstancesPerAgent (1024); negative: no bound.
	MaxInstancesPerAgent int
	// Logger gets the requester's logs (component "requester");
	// nil discards them.
	Logger *logrus.Entry

	// now replaces time.Now in the subscription cache (tests).
	now func() time.Time
}

// InterimFunc receives, in order, the messages an agent sends for an open
// call before its final response: notifications/progress,
// notifications/message, and agent-to-client requests.
type InterimFunc func(correlationID string, msg *jsonrpc.Message)

// Stats are the Requester's counters since it was made.
type Stats struct {
	// Subscription cache.
	Hits, Misses      uint64 // lookups that found / did not find a context's subscription
	Subscribes        uint64 // successful bus subscribes of contexts' reply filters
	SubscribeErrors   uint64
	Unsubscribes      uint64 // bus unsubscribes of reply filters (failed ones included)
	UnsubscribeErrors uint64
	Evictions         uint64 // contexts dropped because the LRU was full
	Expired           uint64 // contexts dropped after ContextTTL idle
	Contexts          int    // contexts subscribed now
	Pinned            int    // of which: over the bound because calls are in flight

	// Calls and replies.
	Pending        int    // calls waiting for their answer now
	Dropped        uint64 // replies that were not a well-formed envelope or JSON-RPC message
	Late           uint64 // replies for no open call (caller gone, or never ours)
	Duplicates     uint64 // replies for a call that already had its final answer
	Mismatched     uint64 // replies whose correlationId is open but that come from another agent or on another context's topic
	InterimDropped uint64 // interim messages over the per-call queue bound
	BadPresence    uint64 // presence messages that could not be understood
	// PresenceTooLarge counts presence messages over MaxPresenceBytes,
	// ignored.
	PresenceTooLarge uint64
	// InstancesRefused counts statuses of new instances not admitted
	// because their agent had Options.MaxInstancesPerAgent already.
	InstancesRefused uint64
	Claims           uint64 // calls an agent claimed (see ClaimMethod)
}

// Requester sends MCP requests to expert agents, each to one agent by name,
// and waits for their answers. It keeps one subscription per context (its
// reply filter, whatever the number of agents) in an LRU, matches replies
// to calls by correlation ID and checks they come from the call's agent,
// enforces deadlines, and watches agent presence. Safe for concurrent use.
type Requester struct {
	bus      Bus
	opts     Options
	log      *logrus.Entry
	cache    *subCache
	pending  *pendingTable
	presence *presenceWatch
	idPrefix string
	seq      atomic.Uint64
	turn     atomic.Uint64 // AddressInstances: the next instance in turn
	// suspecting: AddressInstances with presence and a SuspectAfter, so
	// suspectSilent runs.
	suspecting bool
	onReply    MessageHandler
	onPresence MessageHandler
	// publishWaits: the bus's Publish may block (a network round trip),
	// so it gets a context with the call's deadline.
	publishWaits bool
	stopLink     func() // stops watchLink (link.go)
	expireDone   chan struct{}
	expireWG     sync.WaitGroup // expirePresence

	dropped, late, duplicates, mismatched, interimDropped, badPresence, claims atomic.Uint64
	presenceTooLarge, instancesRefused                                         atomic.Uint64
	// presenceHeard: a presence message arrived since Start; silenceLogged:
	// noteSilentPresence has spoken.
	presenceHeard, silenceLogged atomic.Bool

	mu         sync.Mutex
	started    bool
	startedAt  time.Time
	closed     bool
	active     int           // Request calls running
	idle       chan struct{} // closed once closed and active == 0
	idleClosed bool
}

// publishWaiter is a Bus that says whether its Publish may block. The
// embedded broker's InlineBus does not: it routes the message and returns.
type publishWaiter interface {
	PublishWaits() bool
}

// New makes a Requester over bus. Call Start before Request.
func New(bus Bus, opts Options) *Requester {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.ListTimeout <= 0 {
		opts.ListTimeout = DefaultListTimeout
	}
	if opts.MaxContexts <= 0 {
		opts.MaxContexts = DefaultMaxContexts
	}
	if opts.ContextTTL <= 0 {
		opts.ContextTTL = DefaultContextTTL
	}
	if opts.SuspectAfter == 0 {
		opts.SuspectAfter = DefaultSuspectAfter
	}
	if opts.MaxInstancesPerAgent == 0 {
		opts.MaxInstancesPerAgent = DefaultMaxInstancesPerAgent
	}
	r := &Requester{
		bus:      bus,
		opts:     opts,
		log:      logutil.Component(opts.Logger, "requester"),
		presence: newPresenceWatch(),
		// The prefix tells this requester's IDs from other gateways'.
		idPrefix: "c-" + contract.RandomID(6) + "-",
		idle:     make(chan struct{}),
	}
	r.presence.maxInstances = max(opts.MaxInstancesPerAgent, 0)
	r.suspecting = opts.AddressInstances && !opts.IgnorePresence && opts.SuspectAfter > 0
	r.pending = newPendingTable(r.seqOf)
	r.onReply = r.handleReply
	r.onPresence = r.handlePresence
	r.publishWaits = true
	if w, ok := bus.(publishWaiter); ok {
		r.publishWaits = w.PublishWaits()
	}
	r.stopLink = r.watchLink()
	r.cache = newSubCache(r, subCacheOptions{
		maxEntries: opts.MaxContexts,
		ttl:        opts.ContextTTL,
		now:        opts.now,
		logger:     logutil.Component(opts.Logger, "requester.subcache"),
	})
	return r
}

// subscribe and unsubscribe make the Requester the subscription cache's
// subscriber: every response topic goes to the same handler.
func (r *Requester) subscribe(ctx context.Context, topic string) error {
	return r.bus.Subscribe(ctx, topic, r.onReply)
}

func (r *Requester) unsubscribe(ctx context.Context, topic string) error {
	return r.bus.Unsubscribe(ctx, topic)
}

// reapInterval is how often expired contexts are looked for: often enough
// that a context outlives its TTL by a small fraction of it.
func reapInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/8, 10*time.Millisecond), time.Minute)
}

// Start subscribes to agent presence and starts the unsubscribe worker and
// the TTL reaper. Those stop in Close.
func (r *Requester) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.started {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	if err := r.bus.Subscribe(ctx, contract.PresenceFilter, r.onPresence); err != nil {
		if h, ok := r.bus.(presenceHinter); ok && errors.Is(err, ErrSubscribeRefused) {
			return fmt.Errorf("requester: subscribe to presence: %w: no agent would ever be online to this gateway; %s", err, h.presenceHint())
		}
		return fmt.Errorf("requester: subscribe to presence: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.started = true
	r.startedAt = time.Now()
	r.presence.trustRetained(r.startedAt.Add(presenceGrace))
	r.cache.start(reapInterval(r.opts.ContextTTL))
	r.expireDone = make(chan struct{})
	r.expireWG.Go(r.expirePresence)
	return nil
}

// presenceExpiryCheck is how often silent instances are looked for.
const presenceExpiryCheck = time.Second

// expirePresence takes offline the instances that stopped repeating their
// online status (presenceWatch.expire), and with AddressInstances looks
// for unresponsive ones (suspectSilent), until Close.
func (r *Requester) expirePresence() {
	t := time.NewTicker(presenceExpiryCheck)
	defer t.Stop()
	var suspectTick <-chan time.Time // nil: never
	if r.suspecting {
		st := time.NewTicker(r.opts.SuspectAfter)
		defer st.Stop()
		suspectTick = st.C
	}
	for {
		select {
		case now := <-t.C:
			for _, ch := range r.presence.expire(now) {
				r.log.WithField("instance", ch.instanceGone).Warn("an agent instance stopped repeating its presence: taken for gone")
				r.presenceChanged(ch)
			}
		case now := <-suspectTick:
			r.suspectSilent(now)
		case <-r.expireDone:
			return
		}
	}
}

// suspectSilent takes for unresponsive the instances that have said
// nothing of a call addressed to them a SuspectAfter or more before now,
// and no longer those that have said something of an open call. Looking
// every SuspectAfter, it finds one between one and two of them late.
func (r *Requester) suspectSilent(now time.Time) {
	silent, alive := r.pending.lookAtInstances(now.Add(-r.opts.SuspectAfter))
	for key := range alive {
		delete(silent, key)
	}
	for _, key := range r.presence.markSuspect(silent, alive) {
		r.log.WithFields(logrus.Fields{"instance": key, "after": r.opts.SuspectAfter}).
			Warn("an agent instance has neither answered nor claimed a call sent to it: new calls go to its agent's other instances until it is heard from")
	}
}

// enter registers a running Request; it fails once Close has begun.
func (r *Requester) enter() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if !r.started {
		return ErrNotStarted
	}
	r.active++
	return nil
}

func (r *Requester) leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active--
	if r.closed && r.active == 0 && !r.idleClosed {
		r.idleClosed = true
		close(r.idle)
	}
}

// nextID returns a new correlation ID and the sequence number it is made
// from: idPrefix, the number in base 36, '-' and 16 hex digits drawn from
// crypto/rand for this call alone. The random part makes an ID unguessable
// from the ones before it (an agent sees the IDs of the calls it serves);
// the number keeps IDs unique and indexes the table of recent calls.
func (r *Requester) nextID() (string, uint64) {
	seq := r.seq.Add(1)
	var nonce [idNonceBytes]byte
	_, _ = rand.Read(nonce[:]) // never fails on supported platforms
	var buf [64]byte
	b := append(buf[:0], r.idPrefix...)
	b = strconv.AppendUint(b, seq, 36)
	b = append(b, '-')
	return string(hex.AppendEncode(b, nonce[:])), seq
}

// idNonceBytes is the random part of a correlation ID, in bytes.
const idNonceBytes = 8

// seqOf returns the sequence number of a correlation ID nextID made (and
// false for any other string, including other spellings of the number).
func (r *Requester) seqOf(id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, r.idPrefix)
	if !ok {
		return 0, false
	}
	digits, nonce, ok := strings.Cut(rest, "-")
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 13 || len(nonce) != 2*idNonceBytes {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if c := digits[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			return 0, false
		}
	}
	for i := 0; i < len(nonce); i++ {
		if c := nonce[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(digits, 36, 64)
	return seq, err == nil
}

// callTimers recycles the timers of calls' deadlines: one per call, and a
// timer costs three allocations. Since Go 1.23 a stopped timer delivers no
// stale tick, so a recycled one needs no draining.
var callTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

func startCallTimer(d time.Duration) *time.Timer {
	t := callTimers.Get().(*time.Timer)
	t.Reset(d)
	return t
}

func stopCallTimer(t *time.Timer) {
	t.Stop()
	callTimers.Put(t)
}

// Request sends one JSON-RPC request (method, params) in context c to agent
// (its name on the bus: any instance of its pool takes it) and waits for
// the final response: the JSON-RPC response whose id is the call's
// correlation ID, on a reply topic of that agent in that context. A JSON-RPC error response is returned as
// the message (its Error set) with a nil error: the caller decides how to
// relay it. Messages the agent sends first for the same call go to
// interim, in order (nil interim: dropped).
//
// The deadline is the earlier of ctx's and CallTimeout. When it passes, or
// ctx is cancelled, Request sends notifications/cancelled for the call to
// the agent and returns an error wrapping ErrTimeout (deadline) or
// ctx.Err() (cancellation). With presence on, it fails with ErrNoAgent when
// no instance of the agent is online, at once or as soon as the last goes.
func (r *Requester) Request(ctx context.Context, c contract.Context, agent string, caller *contract.Caller, method string, params json.RawMessage, interim InterimFunc) (*jsonrpc.Message, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("requester: %w", err)
	}
	if err := contract.ValidateLevel(agent); err != nil {
		return nil, fmt.Errorf("requester: agent: %w", err)
	}
	if method == "" {
		return nil, errors.New("requester: empty method")
	}
	// Encoding validates params: first, so that bad params fail before
	// anything else happens.
	id, seq := r.nextID()
	dl := newCallDeadline(ctx, r.opts.CallTimeout)
	payload, err := contract.AppendRequest(make([]byte, 0, 256+len(params)), id, dl.at.UnixMilli(), caller, method, params)
	if err != nil {
		return nil, fmt.Errorf("requester: %s: params are not valid JSON: %w", method, err)
	}
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer r.leave()
	defer dl.release()
	return r.await(ctx, &dl, c, agent, contract.HeldBy(params), id, seq, method, payload, interim)
}

// callDeadline is one call's deadline: the earlier of its ctx's and
// CallTimeout. A context carrying it is made only for the steps that may
// block (waiting for an agent or a subscription, a publish that waits for
// the broker): deriving one costs more than the rest of a call that needs
// none, so the wait for the answer uses a timer instead.
type callDeadline struct {
	parent   context.Context
	at       time.Time
	ownTimer bool // at comes from CallTimeout, not from parent's deadline
	ctx      context.Context
	cancel   context.CancelFunc
}

func newCallDeadline(parent context.Context, timeout time.Duration) callDeadline {
	d := callDeadline{parent: parent, at: time.Now().Add(timeout), ownTimer: true}
	if pd, ok := parent.Deadline(); ok && !pd.After(d.at) {
		d.at, d.ownTimer = pd, false
	}
	return d
}

// context returns a context with the call's deadline.
func (d *callDeadline) context() context.Context {
	if d.ctx == nil {
		if d.ownTimer {
			d.ctx, d.cancel = context.WithDeadline(d.parent, d.at)
		} else {
			d.ctx = d.parent
		}
	}
	return d.ctx
}

func (d *callDeadline) release() {
	if d.cancel != nil {
		d.cancel()
	}
}

// err is why the call ended early: ErrTimeout-compatible once the deadline
// has passed, the parent's error otherwise (nil if neither).
func (d *callDeadline) err() error {
	if err := d.parent.Err(); err != nil {
		return err
	}
	if d.ctx != nil {
		if err := d.ctx.Err(); err != nil {
			return err
		}
	}
	if !time.Now().Before(d.at) {
		return context.DeadlineExceeded
	}
	return nil
}

// await publishes one encoded request (correlation ID id) and waits for its
// final answer. held is the instance whose requestState the request echoes
// (contract.HoldState): it goes to that instance alone; "" if none.
func (r *Requester) await(ctx context.Context, dl *callDeadline, c contract.Context, agent, held, id string, seq uint64, method string, payload []byte, interim InterimFunc) (*jsonrpc.Message, error) {
	if !r.opts.IgnorePresence {
		if online, _ := r.presence.agentOnline(agent); !online {
			if err := r.waitForAgent(dl.context(), agent); err != nil {
				return nil, r.callErr(dl.context(), method, err)
			}
		}
	}

	levels := c.Levels()
	instance := contract.AnyInstance
	switch {
	case held != "":
		// Only that instance holds the request: another would not know it,
		// and a gone one will never answer.
		if !r.opts.IgnorePresence && !r.presence.instanceOnline(agent, held) {
			return nil, fmt.Errorf("requester: %s: instance %s, which held the request: %w", method, held, ErrAgentGone)
		}
		instance = held
	case r.opts.AddressInstances:
		if in, ok := r.presence.pickInstance(agent, r.turn.Add(1)-1); ok {
			instance = in
		}
	}
	reqTopic := contract.TopicPrefix + agent + "/" + instance + "/" + levels + "/" + contract.Request
	filter := contract.TopicPrefix + "+/+/" + levels + "/" + contract.Reply
	sub := r.cache.acquireActive(filter)
	if sub == nil {
		var err error
		if sub, err = r.cache.acquire(dl.context(), filter); err != nil {
			return nil, r.callErr(dl.context(), method, err)
		}
	}
	defer r.cache.release(sub)

	// The filter's tail is the context's ReplyKey (no second string built).
	p := newPendingCall(id, seq, agent, filter[len(contract.TopicPrefix)+len("+/+/"):])
	if instance != contract.AnyInstance {
		p.claim(instance) // it is that instance's call from the start
		if r.suspecting {
			p.sent = time.Now() // before add: suspectSilent reads it under the table's lock
		}
	}
	r.pending.add(p)
	answered := false
	defer func() { r.pending.remove(p, answered) }()
	// Checked after add: a presence change that fails pending calls either
	// sees this call or happened before this check.
	if !r.opts.IgnorePresence {
		if online, _ := r.presence.agentOnline(agent); !online {
			return nil, fmt.Errorf("requester: %s: %w", method, ErrNoAgent)
		}
	}

	pubCtx := ctx
	if r.publishWaits {
		pubCtx = dl.context()
	}
	if err := r.bus.Publish(pubCtx, reqTopic, payload); err != nil {
		if derr := dl.err(); derr != nil {
			return nil, r.callErr(ctx, method, derr)
		}
		return nil, fmt.Errorf("requester: %s: publish: %w", method, err)
	}

	// The parent's deadline, if it is the call's, fires through ctx.Done.
	var expired <-chan time.Time
	if dl.ownTimer {
		t := startCallTimer(time.Until(dl.at))
		defer stopCallTimer(t)
		expired = t.C
	}
	for {
		var timedOut bool
		select {
		case <-p.notify:
			ims, final, ferr := p.take()
			if interim != nil {
				for _, m := range ims {
					interim(id, m)
				}
			}
			if final != nil {
				answered = true
				return final, nil
			}
			if ferr != nil {
				return nil, fmt.Errorf("requester: %s: %w", method, ferr)
			}
			continue
		case <-ctx.Done():
		case <-expired:
			timedOut = true
		}
		// An answer that raced the deadline still counts.
		if ims, final, _ := p.take(); final != nil {
			if interim != nil {
				for _, m := range ims {
					interim(id, m)
				}
			}
			answered = true
			return final, nil
		}
		cause := context.DeadlineExceeded
		if !timedOut {
			cause = ctx.Err()
		}
		r.sendCancelled(ctx, c, p, errors.Is(cause, context.DeadlineExceeded))
		return nil, r.callErr(ctx, method, cause)
	}
}

// callErr turns a failure into the error Request returns: a passed deadline
// becomes ErrTimeout (still matching context.DeadlineExceeded).
func (r *Requester) callErr(ctx context.Context, method string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("requester: %s: %w: %w", method, ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("requester: %s: %w", method, err)
}

// waitForAgent returns nil when an instance of agent is online (or
// presence is ignored), ErrNoAgent otherwise. Just after Start it gives the
// retained presence statuses a moment to arrive.
func (r *Requester) waitForAgent(ctx context.Context, agent string) error {
	if r.opts.IgnorePresence {
		return nil
	}
	r.mu.Lock()
	graceEnd := r.startedAt.Add(presenceGrace)
	r.mu.Unlock()
	for {
		online, changed := r.presence.agentOnline(agent)
		if online {
			return nil
		}
		wait := time.Until(graceEnd)
		if wait <= 0 {
			r.noteSilentPresence(agent)
			return ErrNoAgent
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
			r.noteSilentPresence(agent)
			return ErrNoAgent
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// presenceHinter is a Bus that can say why agent presence may not reach
// it (PahoBus: its login's right to read it on an external broker).
type presenceHinter interface{ presenceHint() string }

// noteSilentPresence logs, once, that a call found no agent online while
// no presence message at all has arrived since Start, on a bus that can say
// why: a broker that lets the gateway subscribe to presence but delivers
// none of it (Mosquitto, to an identity its ACL gives no read access)
// looks like a bus without agents, and says nothing itself.
func (r *Requester) noteSilentPresence(agent string) {
	h, ok := r.bus.(presenceHinter)
	if !ok || r.presenceHeard.Load() || !r.silenceLogged.CompareAndSwap(false, true) {
		return
	}
	r.log.WithField("agent", agent).Error("a call found no expert agent online, and no agent presence has reached this gateway " +
		"since it started: if agents are running, " + h.presenceHint())
}

// sendCancelled tells the agent that call p is abandoned, so it can stop
// working on it: the instance that claimed it, or else each online
// instance of the pool (the pool's own topic would hand it to one, with
// several perhaps not the one at work; the others ignore a call they do
// not know). ctx is the call's own, possibly done: the publishes get a
// short deadline of their own.
func (r *Requester) sendCancelled(ctx context.Context, c contract.Context, p *pendingCall, deadlineExceeded bool) {
	id := p.id
	reason := "cancelled by the client"
	if deadlineExceeded {
		reason = "deadline exceeded"
	}
	msg, _ := json.Marshal(&jsonrpc.Message{JSONRPC: jsonrpc.Version, Method: "notifications/cancelled",
		Params: mustJSON(map[string]string{"requestId": id, "reason": reason})})
	env := contract.Envelope{CorrelationID: id, Message: msg}
	payload, err := env.Encode()
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelPublishTimeout)
	defer cancel()
	instances := []string{instanceOf(p)}
	if instances[0] == contract.AnyInstance {
		if online := r.presence.onlineInstances(p.agent); len(online) > 0 {
			instances = online
		}
	}
	for _, in := range instances {
		if err := r.bus.Publish(pctx, c.RequestTopic(p.agent, in), payload); err != nil {
			r.log.WithError(err).WithField("correlationId", id).Debug("could not send notifications/cancelled")
		}
	}
}

// instanceOf is the instance a message tied to call p goes to: the one
// that claimed it, else any of the pool.
func instanceOf(p *pendingCall) string {
	if in := p.claimedBy(); in != "" {
		return in
	}
	return contract.AnyInstance
}

// ListTools asks agent for its tools in context c and returns the result
// object of tools/list, raw. Its deadline is ListTimeout (or ctx's, if
// earlier). A JSON-RPC error from the agent is returned as a *jsonrpc.Error.
func (r *Requester) ListTools(ctx context.Context, c contract.Context, agent string, caller *contract.Caller) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.ListTimeout)
	defer cancel()
	m, err := r.Request(ctx, c, agent, caller, "tools/list", nil, nil)
	return resultOf(m, err)
}

// CallTool calls agent's tool name with args (a JSON object, or nil) in
// context c and returns the result object of tools/call, raw. A JSON-RPC error from
// the agent is returned as a *jsonrpc.Error; a tool's own failure is a
// result with isError true, returned as a result.
func (r *Requester) CallTool(ctx context.Context, c contract.Context, agent string, caller *contract.Caller, name string, args json.RawMessage, interim InterimFunc) (json.RawMessage, error) {
	params, err := json.Marshal(struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}{name, args})
	if err != nil {
		return nil, fmt.Errorf("requester: tools/call %s: arguments are not valid JSON: %w", name, err)
	}
	m, err := r.Request(ctx, c, agent, caller, "tools/call", params, interim)
	return resultOf(m, err)
}

func resultOf(m *jsonrpc.Message, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, err
	}
	if m.Error != nil {
		return nil, m.Error
	}
	return m.Result, nil
}

// Send publishes msg, tied to the open call correlationID of context c, to
// the agent instance serving that call: the client's answers to the
// agent's own requests (sampling, elicitation). It fails with ErrNoCall if
// no such call is open in c.
func (r *Requester) Send(ctx context.Context, c contract.Context, correlationID string, msg *jsonrpc.Message) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("requester: %w", err)
	}
	if msg == nil {
		return errors.New("requester: send: nil message")
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return ErrClosed
	}
	p, kind := r.pending.lookup(correlationID)
	if kind != replyPending || p.replyKey != c.ReplyKey() {
		return fmt.Errorf("requester: send %q: %w", correlationID, ErrNoCall)
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("requester: send: encode: %w", err)
	}
	env := contract.Envelope{CorrelationID: correlationID, Message: raw}
	payload, err := env.Encode()
	if err != nil {
		return fmt.Errorf("requester: send: encode: %w", err)
	}
	if err := r.bus.Publish(ctx, c.RequestTopic(p.agent, instanceOf(p)), payload); err != nil {
		return fmt.Errorf("requester: send: %w", err)
	}
	return nil
}

// Agents returns what presence says of every agent instance heard of,
// online ones first; one offline for more than OfflineForgotten is
// forgotten.
func (r *Requester) Agents() []AgentStatus { return r.presence.list(time.Now()) }

// OnlineAgents returns the names of the agents with an instance online,
// sorted. Just after Start, when none is online yet, it waits for their
// retained presence a moment (as Request does), bounded by ctx.
func (r *Requester) OnlineAgents(ctx context.Context) []string {
	r.mu.Lock()
	graceEnd := r.startedAt.Add(presenceGrace)
	r.mu.Unlock()
	for {
		names, changed := r.presence.onlineAgents()
		wait := time.Until(graceEnd)
		if len(names) > 0 || r.opts.IgnorePresence || wait <= 0 {
			return names
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return names
		}
	}
}

// ContextInfo is one context the Requester holds a subscription for.
type ContextInfo struct {
	Context  contract.Context
	LastUsed time.Time
}

// Contexts lists the subscribed contexts of one user ("" = every user),
// most recently used first. It walks the whole cache: for operators and
// diagnostics, not for the hot path.
func (r *Requester) Contexts(userID string) []ContextInfo {
	var out []ContextInfo
	r.cache.each(func(filter string, lastUse time.Time) {
		c, err := contract.ParseReplyFilter(filter)
		if err == nil && (userID == "" || c.UserID == userID) {
			out = append(out, ContextInfo{Context: c, LastUsed: lastUse})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed) })
	return out
}

// PresenceChanged returns a channel closed at the next agent presence
// change (an agent coming online, going offline or clearing its status).
func (r *Requester) PresenceChanged() <-chan struct{} {
	_, changed := r.presence.onlineAgents()
	return changed
}

// PresenceGeneration counts the agent presence changes seen so far: an agent
// coming online, going offline or clearing its status. Data cached from
// agents (tool lists) is stale once the generation moves.
func (r *Requester) PresenceGeneration() uint64 { return r.presence.generation() }

// AgentGeneration is the PresenceGeneration of the latest change among
// agent's own instances (0 when none is known): data cached from that
// agent alone is stale once it moves, and stays fresh while other agents
// come, go or churn.
func (r *Requester) AgentGeneration(agent string) uint64 { return r.presence.agentGeneration(agent) }

// AgentOnlineSince is since when agent has been online without a break:
// its first online instance's since (the same on every gateway), but for
// an agent that came online while this gateway listened no earlier than
// RankSlack before it heard so, so that a status cannot claim an earlier
// place than its agent had. The gateway's union lets the agent online
// longest keep a tool name that agents online since later also list.
// false when no instance of agent is online.
func (r *Requester) AgentOnlineSince(agent string) (time.Time, bool) {
	return r.presence.agentOnlineSince(agent)
}

// Stats returns the counters.
func (r *Requester) Stats() Stats {
	cs := r.cache.snapshot()
	return Stats{
		Hits:              cs.hits,
		Misses:            cs.misses,
		Subscribes:        cs.subscribes,
		SubscribeErrors:   cs.subErrors,
		Unsubscribes:      cs.unsubscribes,
		UnsubscribeErrors: cs.unsubErrs,
		Evictions:         cs.evictions,
		Expired:           cs.expired,
		Contexts:          cs.live,
		Pinned:            cs.pinned,
		Pending:           r.pending.len(),
		Dropped:           r.dropped.Load(),
		Late:              r.late.Load(),
		Duplicates:        r.duplicates.Load(),
		Mismatched:        r.mismatched.Load(),
		InterimDropped:    r.interimDropped.Load(),
		BadPresence:       r.badPresence.Load(),
		PresenceTooLarge:  r.presenceTooLarge.Load(),
		InstancesRefused:  r.instancesRefused.Load(),
		Claims:            r.claims.Load(),
	}
}

// Close fails waiting calls with ErrClosed, waits for them to return,
// unsubscribes every context and presence, and stops the goroutines. ctx
// bounds the wait; Close is idempotent.
func (r *Requester) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started := r.started
	if r.active == 0 && !r.idleClosed {
		r.idleClosed = true
		close(r.idle)
	}
	r.mu.Unlock()

	r.stopLink()
	if started {
		close(r.expireDone)
		r.expireWG.Wait()
	}
	r.pending.failAll(ErrClosed)
	var errs []error
	select {
	case <-r.idle:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("requester: close: waiting for calls: %w", ctx.Err()))
	}
	if err := r.cache.close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("requester: close: %w", err))
	}
	if started {
		if err := r.bus.Unsubscribe(ctx, contract.PresenceFilter); err != nil {
			errs = append(errs, fmt.Errorf("requester: close: unsubscribe presence: %w", err))
		}
	}
	return errors.Join(errs...)
}

// mustJSON encodes v, which always encodes.
func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
