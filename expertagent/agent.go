package expertagent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/backoff"
	"github.com/toolbus/toolbus/internal/pahoconn"
)

// Defaults of AgentOptions.
const (
	DefaultAgentName            = "expert-agent"
	DefaultAgentVersion         = "dev"
	DefaultAgentConcurrency     = 64
	DefaultAgentConnectTimeout  = 10 * time.Second
	DefaultAgentShutdownTimeout = 10 * time.Second
	DefaultAgentClaimAfter      = 250 * time.Millisecond
	DefaultAgentPresenceEvery   = 30 * time.Second
	// DefaultAgentMaxPacketSize is the largest MQTT packet the Agent
	// publishes: toolbus's embedded broker's default limit
	// (broker.DefaultMaxPacketSize), which it enforces by dropping the
	// connection of a client that sends a larger one.
	DefaultAgentMaxPacketSize = 16 << 20
)

// agentOpTimeout bounds each wait for a broker acknowledgement (PUBACK,
// SUBACK, UNSUBACK) that no caller's context bounds.
const agentOpTimeout = 10 * time.Second

// agentShutdownOpTimeout bounds the offline presence and the unsubscribe
// together at shutdown.
const agentShutdownOpTimeout = 2 * time.Second

// agentResubscribeDelay is how long the Agent waits before it tries again
// to subscribe after a reconnect whose subscription failed.
const agentResubscribeDelay = 2 * time.Second

var (
	// ErrAgentOptions is returned by Run for options it cannot run with.
	ErrAgentOptions = errors.New("invalid agent options")
	// ErrAgentStarted is returned by AddTool after Run started, and by a
	// second Run.
	ErrAgentStarted = errors.New("agent already started")
	// ErrAgentConnect is returned by Run when it could not make its first
	// connection to the broker (bad URL, refused login, timeout) within
	// AgentOptions.ConnectRetry.
	ErrAgentConnect = errors.New("cannot connect to the broker")
	// ErrAgentSubscribe is returned by Run when the broker refuses or does
	// not confirm the first request subscriptions (an identity without the
	// expert-agent role, say).
	ErrAgentSubscribe = errors.New("cannot subscribe to requests")
	// ErrAgentNotServing is returned by Changed while the agent is not
	// serving: before Ready, without a broker connection, or once stopping.
	ErrAgentNotServing = errors.New("agent not serving")
	// ErrReplyTooLarge is returned by Progress and Log for a notification
	// that would make an MQTT packet larger than
	// AgentOptions.MaxPacketSize: it is not sent. (A response that large
	// is replaced by an error the caller reads.)
	ErrReplyTooLarge = errors.New("reply larger than the broker's maximum packet size")
)

// AgentOptions configures an Agent. Every field but BrokerURL and Username
// has a zero value with a documented default.
type AgentOptions struct {
	// BrokerURL is the MQTT broker: tcp://host:port, ssl://host:port,
	// ws://host:port/path (also mqtt://, tls://, mqtts://, wss://,
	// unix://), as paho.mqtt.golang dials it; a proxy in ALL_PROXY is
	// honoured. Several URLs separated by commas (the nodes of a cluster)
	// are tried in order at each connection attempt: the agent fails over
	// to the next when one is down. Required.
	BrokerURL string
	// Username and Password log in to the broker (an identity with the
	// expert-agent role). Username is also the agent's name on the bus: the
	// <agent> level of its request, reply and presence topics, which the
	// broker lets it use for no other name. Every instance logged in with
	// one Username belongs to one pool, which shares the requests for any
	// instance. Required; it must pass contract.ValidateLevel.
	Username, Password string
	// TLSConfig is used for ssl:// and wss:// URLs; nil = system defaults.
	TLSConfig *tls.Config
	// ClientID is the MQTT client ID, which names this instance on the bus:
	// the <instance> level of its presence and reply topics, and of the
	// requests addressed to it alone. "" = Name made fit for a topic level
	// (each run of characters other than A-Z a-z 0-9 _ - becomes one "-":
	// "My agent" gives "My-agent"), "-" and 8 random hex digits. One given
	// here must pass contract.ValidateLevel, and be unique in the pool (the
	// broker takes a second connection with one ID over from the first).
	ClientID string
	// Name and Version are reported in presence and in initialize's
	// serverInfo, for people to read, and may hold any character; the bus
	// knows the agent by Username. "" = DefaultAgentName,
	// DefaultAgentVersion.
	Name, Version string
	// Exclusive subscribes to the pool's requests without $share, for
	// brokers without shared subscriptions: every instance then gets, and
	// answers, every request for any instance (the gateway keeps the first
	// answer). Requests addressed to this instance's ClientID come to it
	// alone either way.
	Exclusive bool
	// Concurrency is how many requests run at once; as many more wait in a
	// queue, and the rest are refused at once with a "busy" error.
	// 0 = DefaultAgentConcurrency.
	Concurrency int
	// ConnectTimeout bounds each connection attempt, the first and each
	// reconnect; 0 = DefaultAgentConnectTimeout.
	ConnectTimeout time.Duration
	// ConnectRetry is how long Run keeps trying to make its first
	// connection (a broker not up yet, a login refused while an operator
	// fixes it), waiting half a second after the first failure and twice
	// as long after each next one, up to 10 s, and logging each failure
	// with the broker's reason, before it returns ErrAgentConnect. 0 =
	// until ctx is done; negative = one attempt. Once connected, the Agent
	// reconnects for as long as it runs, the same way.
	ConnectRetry time.Duration
	// ShutdownTimeout bounds how long Run waits, once ctx is done, for
	// requests in flight before it cancels their contexts (and then as long
	// again for them to return); 0 = DefaultAgentShutdownTimeout.
	ShutdownTimeout time.Duration
	// ClaimAfter is how long a request runs before the Agent claims it
	// (ClaimMethod, on this instance's reply topic), so that a gateway fails
	// the call at once should this instance die, even while others of its
	// pool live. Quick requests are never claimed. 0 =
	// DefaultAgentClaimAfter; negative = never claim.
	ClaimAfter time.Duration
	// MaxPacketSize is the largest MQTT packet the broker accepts from the
	// Agent: a broker drops the connection of a client that sends a larger
	// one, and with it every call in flight. A response that would not fit
	// is replaced before it is published: a tools/call result by an isError
	// result saying the result was too large, any other by a JSON-RPC
	// error (-32603); a notification is not sent (ErrReplyTooLarge). MQTT
	// 3.1.1, which the Agent speaks, has no way for the broker to announce
	// its limit: set this to the broker's (Mosquitto's max_packet_size,
	// NATS's max_payload). 0 = DefaultAgentMaxPacketSize; negative = no
	// check.
	MaxPacketSize int
	// PresenceEvery is how often the online status is published again
	// while connected, so that gateways forget an instance whose broker
	// node died without sending its Will (contract.ExpiryIntervals of
	// these). 0 = DefaultAgentPresenceEvery; negative = never again.
	PresenceEvery time.Duration
	// Logger receives the agent's logs; nil = a logger of its own on
	// standard error, at info level: the failures to connect (a wrong
	// password, a broker that is down, with the broker's reason), losses
	// and reconnections, and the start and stop of serving. To silence it,
	// give a logger whose output is io.Discard.
	Logger *logrus.Entry
}

// MethodHandler serves a JSON-RPC method registered with Handle. Its result
// is encoded with encoding/json (a json.RawMessage passes through). An error
// that is a *jsonrpc.Error is sent as is; any other becomes -32603 with the
// error's text. For a notification the result is discarded.
type MethodHandler func(ctx context.Context, req *MethodRequest) (any, error)

// Agent is an expert agent: an MCP server whose transport is MQTT. Add tools
// with AddTool, then call Run. An Agent runs once.
type Agent struct {
	opts AgentOptions
	log  *logrus.Entry

	mu      sync.Mutex
	started bool
	tools   []Tool
	byName  map[string]int
	methods map[string]MethodHandler

	ready     chan struct{}
	readyOnce sync.Once
	stats     agentCounters

	// Set by Run before the client connects, read-only afterwards.
	toolList    json.RawMessage
	serveCtx    context.Context // parent of every request's context; cancelled when shutdown gives up waiting
	link        agentLink
	filters     []string               // the pool's requests, then this instance's own
	replyPrefix string                 // ff/v2/mcp/<username>/<clientID>/: every reply topic up to its context
	connected   chan struct{}          // OnConnect signals (re)connections here; size 1, coalescing
	onlineSince atomic.Int64           // Unix ms of the latest announce: the since of every online status until the next
	connection  atomic.Pointer[string] // names the current connection in presence (contract.Presence.Connection); nil before the first
	lost        atomic.Bool            // the connection was lost: the next one is a reconnection

	// inMu guards the hand-off from the link's delivery goroutine to
	// the workers: closing is set (and the channels closed) under the write
	// lock, sends happen under the read lock.
	inMu     sync.RWMutex
	closing  bool
	queue    chan *agentCall
	rejects  chan *agentCall
	inflight map[agentCallKey]*agentCall // guarded by flightMu
	flightMu sync.Mutex
}

// NewAgent returns an Agent with opts (copied, defaults filled in).
func NewAgent(opts AgentOptions) *Agent {
	if opts.Name == "" {
		opts.Name = DefaultAgentName
	}
	if opts.Version == "" {
		opts.Version = DefaultAgentVersion
	}
	if opts.ClientID == "" {
		opts.ClientID = clientIDPrefix(opts.Name) + "-" + contract.RandomID(4)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultAgentConcurrency
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultAgentConnectTimeout
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultAgentShutdownTimeout
	}
	if opts.ClaimAfter == 0 {
		opts.ClaimAfter = DefaultAgentClaimAfter
	}
	if opts.PresenceEvery == 0 {
		opts.PresenceEvery = DefaultAgentPresenceEvery
	}
	if opts.MaxPacketSize == 0 {
		opts.MaxPacketSize = DefaultAgentMaxPacketSize
	}
	log := opts.Logger
	if log == nil {
		// Not discarded: an agent with a wrong password or no broker
		// retries for ever, and its author must be able to read why.
		l := logrus.New()
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.InfoLevel)
		log = logrus.NewEntry(l)
	}
	opts.Logger = nil
	return &Agent{
		opts:     opts,
		log:      log.WithFields(logrus.Fields{"component": "expertagent.agent", "agent": opts.Username, "clientId": opts.ClientID}),
		byName:   make(map[string]int),
		methods:  make(map[string]MethodHandler),
		ready:    make(chan struct{}),
		inflight: make(map[agentCallKey]*agentCall),
	}
}

// clientIDPrefix makes name, which is for people, the start of a client
// ID, which is a topic level: each run of bytes contract.ValidateLevel does not
// allow becomes one "-", dashes at either end are dropped, and it is cut
// so that the "-" and random suffix still fit in contract.MaxLevelLen. A name
// with nothing left gives DefaultAgentName.
func clientIDPrefix(name string) string {
	const room = contract.MaxLevelLen - 1 - 8 // "-" and contract.RandomID(4)
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b = append(b, c)
		case len(b) > 0 && b[len(b)-1] != '-':
			b = append(b, '-')
		}
	}
	s := strings.Trim(string(b[:min(len(b), room)]), "-")
	if s == "" {
		return DefaultAgentName
	}
	return s
}

// ClientID is the MQTT client ID the agent connects with: the instance
// level of its presence and reply topics.
func (a *Agent) ClientID() string { return a.opts.ClientID }

// AddTool adds a tool. It must be called before Run; a second tool with the
// same name is refused with ErrDuplicateTool, an invalid one with
// ErrInvalidTool.
func (a *Agent) AddTool(t Tool) error {
	if err := t.validate(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return fmt.Errorf("add tool %q: %w", t.Name, ErrAgentStarted)
	}
	if _, dup := a.byName[t.Name]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateTool, t.Name)
	}
	a.byName[t.Name] = len(a.tools)
	a.tools = append(a.tools, t)
	return nil
}

// Handle serves method with h: the extension point for MCP methods beyond
// tools (resources/*, prompts/*, completion/complete...). h takes precedence
// over the built-in initialize, ping, tools/list and tools/call;
// notifications/cancelled is always the Agent's own. A method named
// "resources/..." or "prompts/..." adds that capability to initialize's
// answer. Handle must be called before Run; later calls are ignored (and
// logged).
func (a *Agent) Handle(method string, h MethodHandler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || method == "" || h == nil || method == agentMethodCancelled {
		a.log.WithField("method", method).Warn("Handle ignored: after Run, empty method, nil handler or notifications/cancelled")
		return
	}
	a.methods[method] = h
}

// Ready is closed once the agent is subscribed to requests and has
// published its online presence for the first time.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// AgentStats are counters since the Agent was created.
type AgentStats struct {
	Received      uint64 // messages the broker delivered
	Requests      uint64 // requests and notifications handed to a handler
	Responses     uint64 // final responses published
	Notifications uint64 // progress and log notifications published
	Cancelled     uint64 // requests cancelled by notifications/cancelled (no response sent)
	Expired       uint64 // requests whose deadline passed before they were answered (no response sent)
	Rejected      uint64 // requests refused because the queue was full
	Dropped       uint64 // bad envelopes, topics or messages, duplicates, and messages after stop
	Panics        uint64 // handler panics (answered as errors)
	PublishErrors uint64 // replies the broker did not acknowledge in time
	TooLarge      uint64 // responses over MaxPacketSize, replaced by an error
	InFlight      int    // requests queued or running now
}

type agentCounters struct {
	received, requests, responses, notifications, cancelled, expired,
	rejected, dropped, panics, publishErrors, tooLarge atomic.Uint64
}

// Stats returns the agent's counters.
func (a *Agent) Stats() AgentStats {
	a.flightMu.Lock()
	n := len(a.inflight)
	a.flightMu.Unlock()
	c := &a.stats
	return AgentStats{
		Received: c.received.Load(), Requests: c.requests.Load(), Responses: c.responses.Load(),
		Notifications: c.notifications.Load(), Cancelled: c.cancelled.Load(), Expired: c.expired.Load(),
		Rejected: c.rejected.Load(), Dropped: c.dropped.Load(), Panics: c.panics.Load(),
		PublishErrors: c.publishErrors.Load(), TooLarge: c.tooLarge.Load(), InFlight: n,
	}
}

// start checks the options, freezes tools and methods, and marks the agent
// started.
func (a *Agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return ErrAgentStarted
	}
	if len(pahoconn.SplitURLs(a.opts.BrokerURL)) == 0 {
		return fmt.Errorf("%w: BrokerURL is required", ErrAgentOptions)
	}
	if a.opts.Username == "" {
		return fmt.Errorf("%w: Username is required: it is the agent's name on the bus", ErrAgentOptions)
	}
	if err := contract.ValidateLevel(a.opts.Username); err != nil {
		return fmt.Errorf("%w: Username (the agent's name on the bus): %w", ErrAgentOptions, err)
	}
	if err := contract.ValidateLevel(a.opts.ClientID); err != nil {
		return fmt.Errorf("%w: ClientID: %w", ErrAgentOptions, err)
	}
	if a.opts.ClientID == contract.AnyInstance {
		return fmt.Errorf("%w: ClientID %q names the whole pool, not an instance", ErrAgentOptions, contract.AnyInstance)
	}
	list, err := agentEncodeToolList(a.tools)
	if err != nil {
		return err
	}
	a.toolList = list
	pool := contract.SharedRequestFilter(a.opts.Username)
	if a.opts.Exclusive {
		pool = contract.RequestFilter(a.opts.Username, contract.AnyInstance)
	}
	a.filters = []string{pool, contract.RequestFilter(a.opts.Username, a.opts.ClientID)}
	a.replyPrefix = contract.TopicPrefix + a.opts.Username + "/" + a.opts.ClientID + "/"
	a.started = true
	return nil
}

// Run connects to the broker and serves requests until ctx is done. It
// connects with a Last Will that marks the instance offline (retained, on
// PresenceTopic(Username, ClientID)), subscribes at QoS 0 to the pool's
// requests (SharedRequestFilter(Username), or RequestFilter(Username,
// AnyInstance) if Exclusive) and to those addressed to its ClientID,
// publishes a retained online presence, and closes Ready. After a lost
// connection it reconnects and subscribes again. When ctx is done it
// publishes offline presence, unsubscribes, waits for requests in flight
// (ShutdownTimeout, then cancels them and waits as long again) and
// disconnects. It returns nil after a clean stop, and an error wrapping
// ErrAgentOptions, ErrAgentConnect or ErrAgentSubscribe if it could not
// start serving (also wrapping ctx's error if ctx ended first).
func (a *Agent) Run(ctx context.Context) error {
	if err := a.start(); err != nil {
		return err
	}
	serveCtx, stopServe := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopServe(nil)
	a.serveCtx = serveCtx
	a.queue = make(chan *agentCall, a.opts.Concurrency)
	a.rejects = make(chan *agentCall, a.opts.Concurrency)
	a.connected = make(chan struct{}, 1)

	var workers, rejecter, claimer sync.WaitGroup
	for range a.opts.Concurrency {
		workers.Go(a.worker)
	}
	rejecter.Go(a.rejectLoop)
	if a.opts.ClaimAfter > 0 {
		claimer.Go(func() { a.claimLoop(serveCtx) })
	}
	defer claimer.Wait() // it stops with serveCtx, which shutdown cancels

	a.link = a.newLink()
	err := a.connect(ctx)
	if err == nil {
		err = a.serve(ctx)
	}
	a.shutdown(ctx, &workers, &rejecter, stopServe)
	if err != nil {
		return err
	}
	a.log.Info("expert agent stopped")
	return nil
}

// ErrLoginRefused is wrapped by the error of a connection attempt the
// broker answered with a refusal (an MQTT 3.1.1 CONNACK return code 1 to
// 5), which Run logs and, once it gives up, returns within
// ErrAgentConnect. The error says the broker's reason in words, and wraps
// paho's error for the code too (packets.ErrorRefusedBadUsernameOrPassword
// and the like).
var ErrLoginRefused = errors.New("the broker refused the login")

// agentRefusals put paho's errors for the CONNACK return codes in words
// that say what to do. toolbus's broker answers 3 "server unavailable"
// (MQTT 5's 0x9F and 0x89 have no 3.1.1 code) when it did not check the
// password at all: too many failed logins from the agent's address, or
// too many logins queued at once.
var agentRefusals = []struct {
	err   error
	words string
}{
	{packets.ErrorRefusedBadProtocolVersion, "unacceptable protocol version: the broker does not speak MQTT 3.1.1"},
	{packets.ErrorRefusedIDRejected, "client ID rejected: the broker does not accept this ClientID (--client-id)"},
	{packets.ErrorRefusedServerUnavailable, "server unavailable: too many failed logins from this address, or too many logins at once " +
		"(the password was not checked); wait, and check the password"},
	{packets.ErrorRefusedBadUsernameOrPassword, "bad user name or password: check Username and Password " +
		"(an operator may be resetting the password)"},
	{packets.ErrorRefusedNotAuthorised, "not authorised: the password is right, but the broker does not allow this login: " +
		"a disabled identity, or a Will or client ID the identity may not use (is it an expert-agent identity?)"},
}

// agentLoginRefusedError is a refusal in words (agentRefusals); it wraps
// ErrLoginRefused and paho's error.
type agentLoginRefusedError struct {
	words string
	cause error
}

func (e *agentLoginRefusedError) Error() string   { return ErrLoginRefused.Error() + ": " + e.words }
func (e *agentLoginRefusedError) Unwrap() []error { return []error{ErrLoginRefused, e.cause} }

// agentRefusal returns err in words if it is a broker's refusal, else err.
func agentRefusal(err error) error {
	for _, r := range agentRefusals {
		if errors.Is(err, r.err) {
			return &agentLoginRefusedError{words: r.words, cause: err}
		}
	}
	return err
}

// The backoff of the first connection's attempts (ConnectRetry).
const (
	agentFirstRetryDelay = 500 * time.Millisecond
	agentMaxRetryDelay   = 10 * time.Second
)

// connect makes the first connection: attempts bounded by ConnectTimeout,
// retried for ConnectRetry, and all by ctx.
func (a *Agent) connect(ctx context.Context) error {
	attempts, err := backoff.Retry(ctx, agentFirstRetryDelay, agentMaxRetryDelay, a.opts.ConnectRetry,
		func() error { return agentRefusal(a.link.connect(ctx)) },
		func(attempt int, err error, wait time.Duration) {
			a.log.WithError(err).WithFields(logrus.Fields{"broker": a.opts.BrokerURL, "attempt": attempt, "retryIn": wait.String()}).
				Warn("cannot connect to the broker; trying again")
		})
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrAgentConnect, a.opts.BrokerURL, err)
	}
	if attempts > 1 {
		a.log.WithField("attempts", attempts).Info("connected to the broker")
	}
	return nil
}

// serve (re)subscribes and announces presence after every connection, until
// ctx is done. Only a failure of the very first subscription ends it early.
func (a *Agent) serve(ctx context.Context) error {
	retry := time.NewTimer(agentResubscribeDelay)
	retry.Stop() // armed only after a failed resubscribe; since Go 1.23 Stop leaves no stale tick
	defer retry.Stop()
	var again <-chan time.Time // the periodic presence, once serving
	if a.opts.PresenceEvery > 0 {
		t := time.NewTicker(a.opts.PresenceEvery)
		defer t.Stop()
		again = t.C
	}
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.connected:
		case <-retry.C:
		case <-again:
			if !first && a.link.isOpen() {
				if err := a.publishPresence(ctx, contract.StatusOnline); err != nil {
					a.log.WithError(err).Debug("periodic presence not sent")
				}
			}
			continue
		}
		if err := a.announce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if first {
				return err
			}
			a.log.WithError(err).Warn("subscribe after reconnect failed; retrying")
			retry.Reset(agentResubscribeDelay)
			continue
		}
		if first {
			first = false
			a.readyOnce.Do(func() { close(a.ready) })
			fields := logrus.Fields{"filters": a.filters, "tools": len(a.tools)}
			if len(a.methods) > 0 {
				// Methods served by Handle (a bridge's tools/list among them):
				// "tools": 0 alone would read as an agent with nothing to serve.
				fields["handled"] = slices.Sorted(maps.Keys(a.methods))
			}
			a.log.WithFields(fields).Info("expert agent serving")
		}
	}
}

// announce subscribes to requests, then marks the agent online: in that
// order, so that no gateway sends a request before the agent can receive it.
func (a *Agent) announce(ctx context.Context) error {
	if err := a.subscribe(ctx); err != nil {
		return err
	}
	if a.connection.Load() != nil {
		// A reconnect: gateways fail the calls this instance says nothing
		// of before its new connection's status, as lost while it was
		// cut off. Those it still runs are not lost: claim them first.
		a.claimInFlight(ctx)
	}
	conn := contract.RandomID(4)
	a.connection.Store(&conn)
	a.bumpSince()
	return a.publishPresence(ctx, contract.StatusOnline)
}

// Changed tells the gateways that what the agent serves (its tools,
// resources or prompts) changed, for every context at once: it publishes
// the online presence again with a new since, so that gateways drop what
// they cached of its lists and tell the MCP clients that listen. It fails
// with ErrAgentNotServing while the agent is not serving.
func (a *Agent) Changed(ctx context.Context) error {
	select {
	case <-a.ready:
	default:
		return ErrAgentNotServing
	}
	a.inMu.RLock()
	closing := a.closing
	a.inMu.RUnlock()
	if closing || !a.link.isOpen() {
		return ErrAgentNotServing
	}
	a.bumpSince()
	return a.publishPresence(ctx, contract.StatusOnline)
}

// bumpSince gives the online status a new since, strictly later than the
// last: two changes (or a change and a reconnect) within one millisecond
// must still read as two.
func (a *Agent) bumpSince() {
	for {
		old := a.onlineSince.Load()
		if a.onlineSince.CompareAndSwap(old, max(time.Now().UnixMilli(), old+1)) {
			return
		}
	}
}

// shutdown stops serving: offline presence, unsubscribe, drain the queue,
// wait for handlers (bounded), disconnect.
func (a *Agent) shutdown(ctx context.Context, workers, rejecter *sync.WaitGroup, stopServe context.CancelCauseFunc) {
	base := context.WithoutCancel(ctx)
	if a.link.isOpen() {
		// Best effort: a broker that went away meanwhile (stopped with the
		// agent, as `make run` does) would hold each for agentOpTimeout.
		// A publish written before the bound still reaches a live broker.
		opCtx, cancel := context.WithTimeout(base, agentShutdownOpTimeout)
		if err := a.publishPresence(opCtx, contract.StatusOffline); err != nil {
			a.log.WithError(err).Warn("publish offline presence")
		}
		if err := a.unsubscribe(opCtx); err != nil {
			a.log.WithError(err).Warn("unsubscribe")
		}
		cancel()
	}
	a.inMu.Lock()
	a.closing = true
	close(a.queue)
	close(a.rejects)
	a.inMu.Unlock()

	if !agentWaitGroup(workers, a.opts.ShutdownTimeout) {
		a.log.WithField("inFlight", a.Stats().InFlight).Warn("requests still running at shutdown; cancelling them")
		stopServe(errAgentStopping)
		if !agentWaitGroup(workers, a.opts.ShutdownTimeout) {
			a.log.WithField("inFlight", a.Stats().InFlight).Error("handlers ignore cancellation; leaving them behind")
		}
	}
	stopServe(errAgentStopping)
	if !agentWaitGroup(rejecter, agentOpTimeout) {
		a.log.Warn("busy replies still pending at shutdown")
	}
	a.link.close()
}

// errAgentStopping is the cause of a request context the Agent cancels
// because it is stopping.
var errAgentStopping = errors.New("expert agent is stopping")

// agentWaitGroup waits for wg at most d; it reports whether wg finished.
// When it gives up, the helper goroutine stays until wg is done.
func agentWaitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
