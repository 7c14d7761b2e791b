package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/store"
)

// keepAliveInterval is how often an idle listening stream gets an SSE
// comment, so that proxies and clients do not take it for dead.
const keepAliveInterval = 25 * time.Second

// toolsListChanged is the notification a listening stream carries when the
// union of tools may have changed (an agent came, went, or said so).
var toolsListChanged = []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)

// PresenceNotifier is an AgentRequester that says when agent presence
// changes (*requester.Requester): the gateway then tells the clients that
// listen that the tool list changed.
type PresenceNotifier interface {
	// PresenceChanged returns a channel closed at the next change.
	PresenceChanged() <-chan struct{}
}

// TokenWatcher is a TokenAuthenticator that says when tokens may have been
// revoked (*store.Store): a listening stream then checks its token again, so
// that a revocation ends it at once rather than at the next recheck.
type TokenWatcher interface {
	// TokensChanged returns a channel closed at the next change.
	TokensChanged() <-chan struct{}
}

// tokenRecheckInterval is how often a listening stream checks its token
// again when nothing signals a change: a revocation by another process (the
// CLI on the same data directory, another replica) reaches no TokenWatcher,
// and the store sees it within its token cache's TTL anyway.
const tokenRecheckInterval = store.DefaultTokenCacheTTL

// tokenEnded returns a channel closed when the token tok (whose secret this
// is) stops being valid: at its expiry, or when it is refused on a
// recheck (revoked, deleted). A listening stream outlives the request that
// authenticated it, and must not outlive its token. The goroutine it
// starts ends with ctx, which the caller cancels when the stream ends.
func (g *Gateway) tokenEnded(ctx context.Context, tok store.Token, secret string) <-chan struct{} {
	ended := make(chan struct{})
	watcher, _ := g.opts.Tokens.(TokenWatcher)
	watch := func() <-chan struct{} { // nil: no signal, the ticker alone
		if watcher == nil {
			return nil
		}
		return watcher.TokensChanged()
	}
	// Taken before the stream is announced and before each check, so that
	// no change falls between a check and the wait for the next one.
	changed := watch()
	go func() {
		var expiry <-chan time.Time
		if !tok.ExpiresAt.IsZero() {
			t := time.NewTimer(time.Until(tok.ExpiresAt))
			defer t.Stop()
			expiry = t.C
		}
		recheck := time.NewTicker(tokenRecheckInterval)
		defer recheck.Stop()
		for {
			if _, err := g.opts.Tokens.AuthenticateToken(ctx, secret); errors.Is(err, store.ErrUnauthenticated) {
				g.logger(ctx).WithError(err).Info("listening stream ended: its token is no longer valid")
				close(ended)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-expiry:
				close(ended)
				return
			case <-changed:
			case <-recheck.C:
			}
			changed = watch()
		}
	}()
	return ended
}

// DefaultListChangedInterval is Options.ListChangedInterval's default.
const DefaultListChangedInterval = time.Second

// listeners are the open listening streams: each has a wake-up channel
// with room for one signal, so a burst of changes is one notification per
// stream, and notify never blocks. Wake-ups are also spaced by an
// interval: an agent churning its presence would otherwise make every
// listening client ask for the tool list again at each change.
type listeners struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	// last is when the streams were last woken; trailing is the timer
	// that wakes them at the end of the interval for the changes that came
	// within it (nil: none pending).
	last     time.Time
	trailing *time.Timer
	// now and afterFunc replace time.Now and time.AfterFunc (tests).
	now       func() time.Time
	afterFunc func(time.Duration, func()) *time.Timer
	// ended is closed when the HTTP server shuts down (EndStreams): the
	// streams end, or Shutdown would wait for them for ever.
	ended     chan struct{}
	endedOnce sync.Once
	// stopped: stop ran (Close or EndStreams); no trailing wake-up is
	// armed again, nobody being left to wake.
	stopped bool
}

func newListeners() *listeners {
	return &listeners{subs: make(map[chan struct{}]struct{}), ended: make(chan struct{}),
		now: time.Now, afterFunc: time.AfterFunc}
}

func (l *listeners) add() chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	return ch
}

func (l *listeners) remove(ch chan struct{}) {
	l.mu.Lock()
	delete(l.subs, ch)
	l.mu.Unlock()
}

// notify wakes every listening stream: at once if the last wake-up is
// every ago or more, else once when every has passed since it (however
// many changes come meanwhile). every <= 0 wakes them at once.
func (l *listeners) notify(every time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.trailing != nil || l.stopped {
		return // the pending wake-up carries this change too
	}
	now := l.now()
	if wait := every - now.Sub(l.last); every > 0 && !l.last.IsZero() && wait > 0 {
		l.trailing = l.afterFunc(wait, l.wakeTrailing)
		return
	}
	l.last = now
	l.wake()
}

// wakeTrailing wakes the streams at the end of an interval.
func (l *listeners) wakeTrailing() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return // stop came after the timer fired
	}
	l.trailing = nil
	l.last = l.now()
	l.wake()
}

// wake wakes every stream; l.mu is held.
func (l *listeners) wake() {
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// stop stops the trailing wake-up, whose timer notify started, and any
// later one: the gateway that owns the listeners is closing.
func (l *listeners) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.trailing != nil {
		l.trailing.Stop()
		l.trailing = nil
	}
}

// ListeningStreams is the number of listening streams open now.
func (g *Gateway) ListeningStreams() int { return g.listeners.count() }

func (l *listeners) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

// EndStreams ends every listening stream: for http.Server.RegisterOnShutdown,
// since Shutdown waits for open requests and these never finish by themselves.
// New ones are refused from then on, and no trailing list_changed wake-up
// is left pending.
func (g *Gateway) EndStreams() {
	g.listeners.endedOnce.Do(func() { close(g.listeners.ended) })
	g.listeners.stop()
}

// notifyListChanged tells the listening streams that the tool list may
// have changed, no more often than ListChangedInterval.
func (g *Gateway) notifyListChanged() {
	every := g.opts.ListChangedInterval
	if every == 0 {
		every = DefaultListChangedInterval
	}
	g.listeners.notify(every)
}

// watchPresence notifies the listening streams of every presence change,
// until Close.
func (g *Gateway) watchPresence(pn PresenceNotifier) {
	defer g.wg.Done()
	for {
		changed := pn.PresenceChanged()
		select {
		case <-changed:
			g.notifyListChanged()
		case <-g.done:
			return
		}
	}
}

// listen serves GET on the MCP endpoint for a legacy session: the session's
// standalone SSE stream, which carries notifications/tools/list_changed
// until the client closes it, the session ends or the server shuts down.
// One stream per session: the spec sends each message on one stream only.
func (g *Gateway) listen(w http.ResponseWriter, r *http.Request) {
	if modernHeader(r.Header.Get(headerProtocolVersion)) {
		// The 2026 wire has no sessions and no GET stream.
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the stateless protocol has no GET stream")
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		writeError(w, http.StatusNotAcceptable, "not_acceptable", "Accept must include text/event-stream")
		return
	}
	s, ok := g.sessionOf(w, r)
	if !ok {
		return
	}
	ended, ok := s.openStream()
	if !ok {
		writeError(w, http.StatusConflict, "stream_open", "this session has a GET stream open already")
		return
	}
	defer s.closeStream()
	select {
	case <-g.listeners.ended:
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "the gateway is shutting down")
		return
	default:
	}

	tok, secret, _ := store.TokenFrom(r.Context())
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	revoked := g.tokenEnded(ctx, tok, secret)
	wake := g.listeners.add()
	defer g.listeners.remove(wake)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	out := &rpcWriter{w: w, canSSE: true, sse: true}
	keepAlive := time.NewTicker(keepAliveInterval)
	defer keepAlive.Stop()
	for {
		select {
		case <-wake:
			out.writeEvent(toolsListChanged)
		case <-keepAlive.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			flush()
		case <-ended:
			return
		case <-revoked:
			return // the client's next request gets 401 and refreshes
		case <-r.Context().Done():
			return
		case <-g.listeners.ended:
			return
		case <-g.done:
			return
		}
	}
}

// subscriptionsListen serves subscriptions/listen (2026-07-28): the
// answer is an event stream that carries, first,
// notifications/subscriptions/acknowledged with the filter honoured, then
// notifications/tools/list_changed if the client asked for them, each
// tagged with the subscription ID (the request's id). It ends when the
// client closes it, or with the final result when the server shuts down.
// Only tool list changes are relayed; the other filter members are not
// honoured, and the acknowledgement says so.
func (g *Gateway) subscriptionsListen(r *request) answer {
	if !r.tok.HasScope(store.ScopeToolsList) {
		return g.lacksScope(r, store.ScopeToolsList)
	}
	if !r.out.open() {
		return failure(jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "subscriptions/listen answers with an event stream: Accept must include text/event-stream"))
	}
	var p struct {
		Notifications struct {
			ToolsListChanged bool `json:"toolsListChanged"`
		} `json:"notifications"`
	}
	if len(r.params) > 0 {
		if err := json.Unmarshal(r.params, &p); err != nil {
			return invalidParams("invalid params: %v", err)
		}
	}
	meta := `{"io.modelcontextprotocol/subscriptionId":` + string(r.id) + `}`
	honoured := `{}`
	if p.Notifications.ToolsListChanged {
		honoured = `{"toolsListChanged":true}`
	}
	if !r.out.send([]byte(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":` + meta + `,"notifications":` + honoured + `}}`)) {
		return answer{}
	}
	changed := []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":` + meta + `}}`)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	revoked := g.tokenEnded(ctx, r.tok, r.secret)
	wake := g.listeners.add()
	defer g.listeners.remove(wake)
	keepAlive := time.NewTicker(keepAliveInterval)
	defer keepAlive.Stop()
	for {
		select {
		case <-wake:
			if p.Notifications.ToolsListChanged && !r.out.send(changed) {
				return answer{}
			}
		case <-keepAlive.C:
			if k, ok := r.out.(interface{ keepAlive() bool }); ok && !k.keepAlive() {
				return answer{}
			}
		case <-r.ctx.Done():
			return answer{} // the client closed the stream
		case <-revoked:
			return answer{} // the client's next request gets 401 and refreshes
		case <-g.listeners.ended:
			return result([]byte(`{"_meta":` + meta + `}`))
		case <-g.done:
			return result([]byte(`{"_meta":` + meta + `}`))
		}
	}
}
