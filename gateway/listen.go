package gateway

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/acl"
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

// listeners are the open listening streams: each has a wake-up channel
// with room for one signal, so a burst of changes is one notification per
// stream, and notify never blocks.
type listeners struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	// ended is closed when the HTTP server shuts down (EndStreams): the
	// streams end, or Shutdown would wait for them for ever.
	ended     chan struct{}
	endedOnce sync.Once
}

func newListeners() *listeners {
	return &listeners{subs: make(map[chan struct{}]struct{}), ended: make(chan struct{})}
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

// notify wakes every listening stream.
func (l *listeners) notify() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
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
// New ones are refused from then on.
func (g *Gateway) EndStreams() {
	g.listeners.endedOnce.Do(func() { close(g.listeners.ended) })
}

// watchPresence notifies the listening streams of every presence change,
// until Close.
func (g *Gateway) watchPresence(pn PresenceNotifier) {
	defer g.wg.Done()
	for {
		changed := pn.PresenceChanged()
		select {
		case <-changed:
			g.listeners.notify()
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
	tok, _, _ := acl.TokenFrom(r.Context())
	id := r.Header.Get(headerSessionID)
	if id == "" {
		writeError(w, http.StatusBadRequest, "missing_session", "missing "+headerSessionID+" header")
		return
	}
	s, err := g.sessions.lookup(id, tok.UserID, tok.ID)
	if err == nil {
		err = g.sessions.checkShared(r.Context(), s)
	}
	if err != nil {
		g.refuse(w, r, http.StatusNotFound, "unknown_session", err.Error())
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
		case <-r.Context().Done():
			return
		case <-g.listeners.ended:
			return
		case <-g.done:
			return
		}
	}
}
