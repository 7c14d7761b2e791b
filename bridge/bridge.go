package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/logutil"
)

// Defaults of Options.
const (
	DefaultHoldTimeout    = 2 * time.Minute
	DefaultInitTimeout    = 30 * time.Second
	DefaultRestartBackoff = 500 * time.Millisecond
	DefaultRestartMax     = 30 * time.Second
	// DefaultMaxMessage is the largest message read from an upstream: the
	// broker's default packet limit, over which no answer reaches a caller.
	DefaultMaxMessage = expertagent.DefaultAgentMaxPacketSize
)

// CallerMetaKey is the _meta member that tells the upstream who the
// gateway authenticated: the contract.Caller of the request, never a token.
const CallerMetaKey = "io.toolbus/caller"

// ErrOptions is returned by New for options it cannot run with.
var ErrOptions = errors.New("invalid bridge options")

// ErrInitTimeout is wrapped by the error of a start whose upstream did not
// answer initialize within Options.InitTimeout (--init-timeout of
// expert-agent bridge).
var ErrInitTimeout = errors.New("the upstream did not start and answer initialize within the init timeout")

// Options configures a Bridge. Command or URL is required (not both); every
// other field has a documented zero value.
type Options struct {
	// Agent are the options of the expert agent that serves the upstream
	// on the bus (broker, identity, concurrency...). Agent.ClientID "" =
	// Username + "-" + random hex, chosen once: the upstream comes back as
	// the same instance after each restart. Agent.Name "" = the name the
	// upstream gives in its serverInfo. Agent.Logger is ignored: Logger is
	// used.
	Agent expertagent.AgentOptions

	// Command starts a stdio upstream: the program and its arguments.
	Command []string
	// Env is the process's environment; nil = the bridge's own without
	// the TOOLBUS_AGENT_* variables (the bridge's broker credentials).
	Env []string
	// Dir is the process's working directory; "" = the bridge's.
	Dir string

	// URL is a Streamable HTTP upstream's endpoint.
	URL string
	// Header is sent with every request to URL: the upstream's
	// credentials, which stay in the bridge.
	Header http.Header
	// HTTPClient makes the requests to URL; nil = a client of its own.
	HTTPClient *http.Client

	// ProtocolVersion is the MCP version to ask the upstream for; "" = the
	// newest the go-sdk client knows, which the upstream may lower.
	ProtocolVersion string

	// MaxMessage bounds one message read from the upstream, in bytes: a
	// stdio line, an HTTP body, an event of an event stream. A longer
	// answer is not kept: the call it answers fails (a tool error for
	// tools/call, a JSON-RPC error -32603 for the others) and the session
	// goes on; any other message that long is dropped. 0 =
	// DefaultMaxMessage.
	MaxMessage int

	// HoldTimeout is how long a call waiting for the client's input is
	// held for the round that brings it; then the upstream's call is
	// cancelled. 0 = DefaultHoldTimeout.
	HoldTimeout time.Duration
	// InitTimeout bounds starting the upstream and its initialize.
	// 0 = DefaultInitTimeout.
	InitTimeout time.Duration
	// RestartBackoff is the first wait before the upstream is started
	// again, doubled after each failure up to RestartMax; an upstream that
	// served for RestartMax resets it. 0 = DefaultRestartBackoff,
	// DefaultRestartMax.
	RestartBackoff, RestartMax time.Duration

	// Logger receives the bridge's logs, the agent's and the upstream
	// process's stderr, line by line; nil = discard.
	Logger *logrus.Entry
}

// Bridge serves one upstream MCP server on the bus. A Bridge runs once.
type Bridge struct {
	opts   Options
	log    *logrus.Entry
	redact redactor // every error that may name the upstream's URL goes through it
}

// New returns a Bridge with opts (copied, defaults filled in), or an error
// wrapping ErrOptions.
func New(opts Options) (*Bridge, error) {
	switch {
	case len(opts.Command) == 0 && opts.URL == "":
		return nil, fmt.Errorf("%w: no upstream: give the server's command or its URL", ErrOptions)
	case len(opts.Command) > 0 && opts.URL != "":
		return nil, fmt.Errorf("%w: give the server's command or its URL, not both", ErrOptions)
	case opts.Agent.Username == "":
		return nil, fmt.Errorf("%w: the agent's username is required", ErrOptions)
	}
	if opts.Agent.ClientID == "" {
		opts.Agent.ClientID = opts.Agent.Username + "-" + contract.RandomID(4)
	}
	if opts.HoldTimeout <= 0 {
		opts.HoldTimeout = DefaultHoldTimeout
	}
	if opts.InitTimeout <= 0 {
		opts.InitTimeout = DefaultInitTimeout
	}
	if opts.RestartBackoff <= 0 {
		opts.RestartBackoff = DefaultRestartBackoff
	}
	if opts.RestartMax <= 0 {
		opts.RestartMax = DefaultRestartMax
	}
	if opts.MaxMessage <= 0 {
		opts.MaxMessage = DefaultMaxMessage
	}
	opts.Command = append([]string(nil), opts.Command...)
	opts.Header = opts.Header.Clone()
	log := logutil.OrDiscard(opts.Logger)
	opts.Logger = nil
	b := &Bridge{
		opts: opts,
		log:  log.WithFields(logrus.Fields{"component": "bridge", "agent": opts.Agent.Username, "clientId": opts.Agent.ClientID}),
	}
	b.redact = newRedactor(opts.URL, b.upstreamName())
	return b, nil
}

// ClientID is the instance the bridge serves as on the bus.
func (b *Bridge) ClientID() string { return b.opts.Agent.ClientID }

// Run serves the upstream until ctx is done: it starts the upstream,
// serves it on the bus while it answers, and starts it again (with
// backoff) when it ends or cannot start. It returns nil once ctx is done,
// and an error for what no restart can mend: agent options the SDK
// refuses, or an identity the broker does not let subscribe to requests.
func (b *Bridge) Run(ctx context.Context) error {
	delay := b.opts.RestartBackoff
	for attempt := 1; ; attempt++ {
		started := time.Now()
		err := b.serveOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, expertagent.ErrAgentOptions) || errors.Is(err, expertagent.ErrAgentSubscribe) {
			return err
		}
		if time.Since(started) >= b.opts.RestartMax {
			delay, attempt = b.opts.RestartBackoff, 1
		}
		b.log.WithError(b.redact.err(err)).WithFields(logrus.Fields{"attempt": attempt, "retryIn": delay.String()}).Warn("upstream not serving; starting it again")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, b.opts.RestartMax)
	}
}

// answeredWait bounds how long a bridge whose upstream died waits for its
// calls in flight to be answered before it goes offline.
const answeredWait = 2 * time.Second

// awaitAnswered returns once agent has no request in flight (each answered
// on the bus), or after max.
func awaitAnswered(agent *expertagent.Agent, max time.Duration) {
	deadline := time.Now().Add(max)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for agent.Stats().InFlight > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
}

// serveOnce runs one lifetime of the upstream: connect, serve on the bus,
// and return when the upstream ends, the agent stops, or ctx is done.
func (b *Bridge) serveOnce(ctx context.Context) error {
	l := newLifetime(b)
	defer l.wait()
	if err := l.connect(ctx); err != nil {
		return err
	}
	defer l.close()

	init := l.cs.InitializeResult()
	opts := b.opts.Agent
	if opts.Name == "" && init.ServerInfo != nil {
		opts.Name = init.ServerInfo.Name
	}
	opts.Logger = b.log
	agent := expertagent.NewAgent(opts)
	l.register(agent, init.Capabilities)

	actx, stop := context.WithCancel(ctx)
	defer stop()
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(actx) }()
	upDone := make(chan error, 1)
	go func() { upDone <- l.cs.Wait() }()

	b.log.WithFields(logrus.Fields{"server": serverName(init), "protocol": init.ProtocolVersion}).Info("upstream initialized; serving it on the bus")
	select {
	case err := <-upDone:
		// The calls in flight fail with the session: let them answer (a
		// tool error naming the upstream) before the agent goes offline,
		// which would fail them as calls to an agent that is gone.
		l.ended(err)
		awaitAnswered(agent, answeredWait)
		stop()
		<-agentDone
		if err == nil {
			err = errors.New("the session closed")
		}
		return fmt.Errorf("upstream ended: %w", b.redact.err(err))
	case err := <-agentDone:
		l.close()
		<-upDone
		if err == nil && ctx.Err() == nil {
			err = errors.New("agent stopped")
		}
		return err
	}
}
