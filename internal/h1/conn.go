package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Connection states, for Shutdown's closing of idle connections.
const (
	stateActive int32 = iota
	stateIdle
	stateClosed // closed while idle
)

// aLongTimeAgo is a read deadline that has passed: it makes a blocked read
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// conn is one client connection served by the fast path, on the goroutine
// that serve runs on; the handler runs there too.
type conn struct {
	srv    *Server
	rwc    net.Conn
	cr     connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	ctx    context.Context
	cancel context.CancelFunc
	state  atomic.Int32

	// deadline is the read deadline set on rwc (zero: none).
	deadline time.Time

	// The watch notices a client that goes away during a long request.
	watchTimer *time.Timer
	watchArmed bool          // the timer is set for the current request
	watchDone  chan struct{} // the watch's goroutine is done
	watchMu    sync.Mutex    // guards the two below
	aborting   bool          // the request is over: the watch must stop
	cancelReq  context.CancelFunc
	watchBuf   [1]byte
	gone       atomic.Bool // the watch saw the client go away
}

// connReader is rwc with the byte, if any, that the watch read.
type connReader struct {
	rwc        net.Conn
	pending    byte
	hasPending bool
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.hasPending && len(p) > 0 {
		p[0] = r.pending
		r.hasPending = false
		return 1, nil
	}
	return r.rwc.Read(p)
}

func newConn(s *Server, rwc net.Conn) *conn {
	c := &conn{srv: s, rwc: rwc, remote: rwc.RemoteAddr().String(), watchDone: make(chan struct{}, 1)}
	c.cr.rwc = rwc
	c.br = bufio.NewReaderSize(&c.cr, bufferSize)
	c.bw = bufio.NewWriterSize(rwc, bufferSize)
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.fallback)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, rwc.LocalAddr())
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.watchTimer = time.AfterFunc(time.Hour, c.watch)
	c.watchTimer.Stop()
	return c
}

// serve reads and answers requests until one does not qualify (the
// connection then goes to the fallback server), the client closes, a
// request asks to close, or the server shuts down.
func (c *conn) serve() {
	handedOver := false
	defer func() {
		c.cancel()
		if !handedOver {
			_ = c.rwc.Close()
		}
		c.srv.forget(c)
	}()
	// A new connection has ReadHeaderTimeout for its first request, as in
	// net/http; a kept-alive one waits for the next up to IdleTimeout.
	c.shortenDeadline(c.srv.fallback.ReadHeaderTimeout)
	first := true
	for {
		if c.srv.inShutdown.Load() {
			return
		}
		if c.br.Buffered() == 0 {
			c.state.Store(stateIdle)
			if !first {
				c.idleDeadline()
			}
			first = false
			if _, err := c.br.Peek(1); err != nil {
				return
			}
			if !c.state.CompareAndSwap(stateIdle, stateActive) {
				return // closed by Shutdown
			}
		}
		h, headDeadline, qualifies, err := c.readHead()
		if err != nil {
			return
		}
		if !qualifies {
			// net/http sets its own deadlines, but not when it has no
			// timeouts: ours must not outlive the handover.
			_ = c.rwc.SetReadDeadline(time.Time{})
			handedOver = true
			c.srv.handOver(&handoffConn{Conn: c.rwc, r: c.br, limit: headDeadline})
			return
		}
		if !c.serveRequest(h) {
			return
		}
	}
}

// readHead reads the next request head. qualifies is false (with the
// head unread) when the fast path does not take the request, or when the
// head stopped coming by the deadline; err is set when the connection
// failed, as net/http would close it then too.
//
// headDeadline is when the head had to be complete, if readHead had to
// wait for it: a connection handed over keeps it for that head.
func (c *conn) readHead() (h head, headDeadline time.Time, qualifies bool, err error) {
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			h, ok := parseHead(buf[:i+4], c.srv.opts.Paths)
			if !ok {
				return h, headDeadline, false, nil
			}
			_, _ = c.br.Discard(i + 4)
			return h, headDeadline, true, nil
		}
		if len(buf) >= bufferSize || !c.mayQualify(buf) {
			return h, headDeadline, false, nil
		}
		if headDeadline.IsZero() {
			c.shortenDeadline(c.srv.fallback.ReadHeaderTimeout)
			headDeadline = c.deadline
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// net/http answers some of these (400 for a request line
				// cut short): it gets the bytes and, its deadline held
				// to the one that passed, answers at once as it would.
				return h, headDeadline, false, nil
			}
			return h, headDeadline, false, err
		}
	}
}

// mayQualify reports whether buf, the start of a request head, can still
// become one the fast path takes: a request line that ends and is not a
// POST of a served path goes to net/http without waiting for the rest.
func (c *conn) mayQualify(buf []byte) bool {
	if bytes.IndexByte(buf, '\n') < 0 {
		return true
	}
	line, _, ok := cutLine(buf)
	if !ok {
		return false
	}
	_, ok = requestTarget(line, c.srv.opts.Paths)
	return ok
}

// serveRequest runs the handler for one request and answers it. It
// reports whether the connection may carry another request.
func (c *conn) serveRequest(h head) (keep bool) {
	c.srv.fast.Add(1)
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: h.target},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h.header,
		ContentLength: h.contentLength,
		Host:          h.host,
		RemoteAddr:    c.remote,
		RequestURI:    h.target,
		Close:         h.close,
		Body:          http.NoBody,
	}
	var b *body
	if h.contentLength > 0 {
		b = &body{c: c, remaining: h.contentLength}
		req.Body = b
	}
	req = req.WithContext(ctx)
	w := &response{c: c, req: req, body: b, header: make(http.Header, 4), closeAfter: h.close}

	c.watchMu.Lock()
	c.cancelReq = cancel
	c.watchMu.Unlock()
	if b == nil {
		c.armWatch()
	}
	panicked := c.runHandler(w, req)
	c.stopWatch()
	if b != nil {
		b.finish()
	}
	if panicked {
		return false
	}
	ok := w.finish()
	return ok && !w.closeAfter && (b == nil || !b.unread()) && !c.gone.Load()
}

// runHandler calls the handler, recovering a panic as net/http does: the
// connection is closed without a response, and the panic is logged unless
// it is http.ErrAbortHandler.
func (c *conn) runHandler(w *response, req *http.Request) (panicked bool) {
	defer func() {
		if err := recover(); err != nil {
			panicked = true
			if err != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.log.WithField("remote", c.remote).Errorf("http: panic serving %s: %v\n%s", c.remote, err, buf)
			}
		}
	}()
	c.srv.fallback.Handler.ServeHTTP(w, req)
	return false
}

// Deadlines. A read deadline costs a timer change, so the fast path sets
// one per request at most, and none when the request is already in the
// buffer: the idle deadline is renewed only when less than half of it is
// left, and the header and body deadlines only shorten it, when a read
// has to wait.

// idleDeadline bounds the wait for the next request by the fallback's
// IdleTimeout (its ReadTimeout if zero, as net/http does): between half of
// it and all of it.
func (c *conn) idleDeadline() {
	d := c.srv.fallback.IdleTimeout
	if d == 0 {
		d = c.srv.fallback.ReadTimeout
	}
	if d <= 0 {
		if !c.deadline.IsZero() {
			c.setDeadline(time.Time{})
		}
		return
	}
	now := time.Now()
	if left := c.deadline.Sub(now); c.deadline.IsZero() || left < d/2 || left > d {
		c.setDeadline(now.Add(d))
	}
}

// shortenDeadline makes the read deadline at most d from now (d ≤ 0: no
// change).
func (c *conn) shortenDeadline(d time.Duration) {
	if d <= 0 {
		return
	}
	if t := time.Now().Add(d); c.deadline.IsZero() || t.Before(c.deadline) {
		c.setDeadline(t)
	}
}

func (c *conn) setDeadline(t time.Time) {
	c.deadline = t
	_ = c.rwc.SetReadDeadline(t)
}

// The watch. net/http reads from the connection in the background while
// a handler runs, from the moment the body has been read, so that a client
// that goes away cancels the request's context. That read costs a
// goroutine and two deadline changes per request; here it starts only when
// the request has run for WatchAfter, on the timer's goroutine.

// armWatch starts the watch's timer once the request body has been read.
// Bytes already buffered mean the client has sent its next request: it is
// there, and reading on would take that request's bytes.
func (c *conn) armWatch() {
	if c.watchArmed || c.br.Buffered() > 0 {
		return
	}
	c.watchArmed = true
	c.watchTimer.Reset(c.srv.opts.WatchAfter)
}

// watch runs on the timer's goroutine: it reads one byte with no deadline.
// A byte is the client's next request, kept for the reader; an error
// before the request is over means the client has gone.
func (c *conn) watch() {
	defer func() { c.watchDone <- struct{}{} }()
	c.watchMu.Lock()
	if c.aborting {
		c.watchMu.Unlock()
		return
	}
	_ = c.rwc.SetReadDeadline(time.Time{})
	c.watchMu.Unlock()
	if c.srv.onWatch != nil {
		c.srv.onWatch()
	}
	n, err := c.rwc.Read(c.watchBuf[:])
	if n > 0 {
		c.cr.pending, c.cr.hasPending = c.watchBuf[0], true
	}
	if err == nil {
		return
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if !c.aborting {
		c.gone.Store(true)
		c.cancelReq()
	}
}

// stopWatch ends the watch when the handler is done: a watch that has not
// started never will; one that reads is woken by a deadline in the past,
// and waited for.
func (c *conn) stopWatch() {
	if !c.watchArmed {
		return
	}
	c.watchArmed = false
	if c.watchTimer.Stop() {
		return
	}
	c.watchMu.Lock()
	c.aborting = true
	c.watchMu.Unlock()
	_ = c.rwc.SetReadDeadline(aLongTimeAgo)
	<-c.watchDone
	c.watchMu.Lock()
	c.aborting = false
	c.watchMu.Unlock()
	c.setDeadline(time.Time{}) // the next request's reads set theirs
}

// closeIfIdle closes the connection if it waits for its next request.
func (c *conn) closeIfIdle() {
	if c.state.CompareAndSwap(stateIdle, stateClosed) {
		_ = c.rwc.Close()
	}
}

// body is a request body of Content-Length bytes, read from the
// connection's buffer.
type body struct {
	c         *conn
	mu        sync.Mutex
	remaining int64
	closed    bool
	sawEOF    bool
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.remaining == 0 {
		b.hitEOF()
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	if b.c.br.Buffered() == 0 {
		b.c.shortenDeadline(b.c.srv.fallback.ReadTimeout)
	}
	n, err := b.c.br.Read(p)
	b.remaining -= int64(n)
	switch {
	case b.remaining == 0:
		// The data and io.EOF together, as net/http's body does.
		b.hitEOF()
		if err == nil {
			err = io.EOF
		}
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) hitEOF() {
	if !b.sawEOF {
		b.sawEOF = true
		b.c.armWatch()
	}
}

// Close marks the body closed; what is left unread is not read (the
// connection is closed after the response instead).
func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// finish closes the body when the handler has returned: a goroutine the
// handler left behind must not read the next request.
func (b *body) finish() { _ = b.Close() }

// handoffConn is a connection handed to net/http: reads go through the
// fast path's buffer first.
type handoffConn struct {
	net.Conn
	r io.Reader
	// limit, if set, caps the first read deadline net/http sets (the one
	// for the head it reads first): a client that was already given
	// ReadHeaderTimeout for that head gets no second one.
	limit time.Time
}

func (h *handoffConn) Read(p []byte) (int, error) { return h.r.Read(p) }

func (h *handoffConn) SetReadDeadline(t time.Time) error {
	if !h.limit.IsZero() {
		if t.IsZero() || t.After(h.limit) {
			t = h.limit
		}
		h.limit = time.Time{}
	}
	return h.Conn.SetReadDeadline(t)
}

// unread reports whether part of the body has not been read.
func (b *body) unread() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remaining > 0
}
