package h1

import (
	"bufio"
	"bytes"
	"context"
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

// As net/http: the most of an unread request body read and discarded to
// keep the connection, and how long to wait, after a response that closes
// a connection with unread data, before the close (see closeWriteAndWait).
const (
	maxPostHandlerReadBytes = 256 << 10
	rstAvoidanceDelay       = 500 * time.Millisecond
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
	// lingerClose: close with closeWriteAndWait, as net/http does after a
	// response that left request bytes unread.
	lingerClose bool
	// headBuf holds a response's header fields from WriteHeader on.
	headBuf []byte

	// The watch notices a client that goes away during a long request.
	watchTimer *time.Timer
	watchDone  chan struct{} // the watch's goroutine is done
	watchMu    sync.Mutex    // guards the fields below
	inHandler  bool          // the handler runs: the watch may start
	watchArmed bool          // the timer is set for the current request
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
	c := &conn{srv: s, rwc: rwc, watchDone: make(chan struct{}, 1)}
	// Linux has been seen to return a nil address for a connection reset
	// at accept (golang/go#23022); net/http guards it too.
	if ra := rwc.RemoteAddr(); ra != nil {
		c.remote = ra.String()
	}
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
		switch {
		case handedOver:
		case c.lingerClose:
			c.closeWriteAndWait()
		default:
			_ = c.rwc.Close()
		}
		c.srv.forget(c)
	}()
	// The first request's head is due ReadHeaderTimeout after the accept,
	// as in net/http; later ones wait up to IdleTimeout for their first
	// byte and then have ReadHeaderTimeout from there.
	headDeadline := c.setDeadlineIn(c.srv.headerTimeout())
	for first := true; ; first = false {
		if c.srv.inShutdown.Load() {
			return
		}
		if c.br.Buffered() == 0 {
			c.state.Store(stateIdle)
			if !first {
				c.idleDeadline()
			}
			if _, err := c.br.Peek(1); err != nil {
				return
			}
			if !c.state.CompareAndSwap(stateIdle, stateActive) {
				return // closed by Shutdown
			}
		}
		if !first {
			headDeadline = time.Time{} // set when a read has to wait
		}
		h, qualifies, err := c.readHead(first, &headDeadline)
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
// connection failed with part of a head read (net/http then answers that
// part as it would); err is set when it failed between requests.
//
// *headDeadline is when the head had to be complete (zero until a read
// has to wait for it on a kept-alive connection): a connection handed
// over keeps it for that head.
func (c *conn) readHead(first bool, headDeadline *time.Time) (h head, qualifies bool, err error) {
	if !first {
		// net/http skips up to 4 bytes of CR or LF after a POST body, which
		// some clients send, waiting for them as for the head.
		for i := 0; i < 4; i++ {
			if c.br.Buffered() == 0 && headDeadline.IsZero() {
				*headDeadline = c.setDeadlineIn(c.srv.headerTimeout())
			}
			b, err := c.br.Peek(1)
			if err != nil {
				return h, false, err
			}
			if b[0] != '\r' && b[0] != '\n' {
				break
			}
			_, _ = c.br.Discard(1)
		}
	}
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			h, ok := parseHead(buf[:i+4], c.srv.opts.Paths)
			if !ok {
				return h, false, nil
			}
			_, _ = c.br.Discard(i + 4)
			return h, true, nil
		}
		if len(buf) >= bufferSize || !c.mayQualify(buf) {
			return h, false, nil
		}
		if headDeadline.IsZero() {
			*headDeadline = c.setDeadlineIn(c.srv.headerTimeout())
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			if len(buf) > 0 {
				// A head cut short by the deadline, a half-close or a
				// reset: net/http answers some (400 for a request line cut
				// short) and closes. It gets the bytes and, its deadline
				// held to the one that passed, does that at once.
				return h, false, nil
			}
			return h, false, err
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
	if d := c.srv.fallback.WriteTimeout; d > 0 {
		_ = c.rwc.SetWriteDeadline(time.Now().Add(d))
	}

	c.watchMu.Lock()
	c.cancelReq = cancel
	c.inHandler = true
	c.watchMu.Unlock()
	if b == nil {
		c.armWatch()
	}
	panicked := c.runHandler(w, req)
	c.stopWatch()
	if panicked {
		return false
	}
	ok := w.finish()
	if b != nil {
		b.finish() // after finish, which may read what is left of it
	}
	return ok && !w.closeAfter && !c.gone.Load()
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
	c.srv.handler.ServeHTTP(w, req)
	return false
}

// closeWriteAndWait closes the writing side and waits before the close,
// as net/http does when it leaves request bytes unread: an immediate close
// would reset the connection, and the client might lose the response.
func (c *conn) closeWriteAndWait() {
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	time.Sleep(rstAvoidanceDelay)
	_ = c.rwc.Close()
}

// Deadlines. A read deadline costs a timer change, so the fast path sets
// none while the request is already in the buffer: it sets one when a
// read has to wait, once per phase (the head, the body), and renews the
// idle deadline only when less than half of it is left.

// headerTimeout bounds the reading of a head: ReadHeaderTimeout, or
// ReadTimeout if zero, as net/http reads them.
func (s *Server) headerTimeout() time.Duration {
	if d := s.fallback.ReadHeaderTimeout; d != 0 {
		return d
	}
	return s.fallback.ReadTimeout
}

// setDeadlineIn sets the read deadline d from now (none for d ≤ 0) and
// returns it.
func (c *conn) setDeadlineIn(d time.Duration) time.Time {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	if !t.Equal(c.deadline) {
		c.setDeadline(t)
	}
	return t
}

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

func (c *conn) setDeadline(t time.Time) {
	c.deadline = t
	_ = c.rwc.SetReadDeadline(t)
}

// The watch. net/http reads from the connection in the background while
// a handler runs, from the moment the body has been read, so that a client
// that goes away cancels the request's context. That read costs a
// goroutine and two deadline changes per request; here it starts only when
// the request has run for WatchAfter, on the timer's goroutine.

// armWatch starts the watch's timer once the request body has been read,
// while the handler runs. Bytes already buffered mean the client has sent
// its next request: it is there, and reading on would take that request's
// bytes. It may run on any goroutine that reads the body.
func (c *conn) armWatch() {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if !c.inHandler || c.watchArmed || c.br.Buffered() > 0 {
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
	c.watchMu.Lock()
	c.inHandler = false
	armed := c.watchArmed
	c.watchArmed = false
	if armed && !c.watchTimer.Stop() {
		c.aborting = true
	}
	aborting := c.aborting
	c.watchMu.Unlock()
	if !aborting {
		return
	}
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
// connection's buffer. Its mutex lets a goroutine the handler left
// behind read it safely until the response is done.
type body struct {
	c           *conn
	mu          sync.Mutex
	remaining   int64
	closed      bool
	sawEOF      bool
	deadlineSet bool // ReadTimeout bounds the reads that wait
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (int, error) {
	if b.remaining == 0 {
		b.hitEOF()
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	if b.c.br.Buffered() == 0 && !b.deadlineSet {
		// From the first read that waits, not from the request's first
		// byte as in net/http: later by the time the handler took to
		// start reading.
		b.deadlineSet = true
		b.c.setDeadlineIn(b.c.srv.fallback.ReadTimeout)
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

// Close closes the body as net/http's does: what is left, up to
// maxPostHandlerReadBytes, is read and dropped, so that the connection
// can carry the next request; more than that closes it after the
// response.
func (b *body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if b.remaining > 0 && b.remaining <= maxPostHandlerReadBytes {
		b.dropLocked()
	}
	b.closed = true
	return nil
}

// dropLocked reads and drops the rest of the body; false if a read failed.
func (b *body) dropLocked() bool {
	var scratch [4096]byte
	for b.remaining > 0 {
		if _, err := b.readLocked(scratch[:]); err != nil && err != io.EOF {
			return false
		}
	}
	return true
}

// discardRest reads and drops what the handler left unread, before the
// response, as net/http does: up to maxPostHandlerReadBytes, so that the
// connection can carry the next request. It reports whether the
// connection must close instead, and whether it should linger (too much
// left to read).
func (b *body) discardRest() (closeAfter, linger bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.remaining == 0:
		return false, false
	case b.closed:
		// Closed by the handler with too much left (or its drain failed):
		// net/http lingers on the first.
		return true, b.remaining > maxPostHandlerReadBytes
	case b.remaining >= maxPostHandlerReadBytes:
		return true, true
	}
	return !b.dropLocked(), false
}

// finish closes the body when the response is done, without reading
// more (the response has drained it, or the connection closes): a
// goroutine the handler left behind reads ErrBodyReadAfterClose. It waits
// for a read in progress.
func (b *body) finish() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

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

// CloseWrite lets net/http half-close the connection as it does on its
// own (a *net.TCPConn's), to avoid a reset.
func (h *handoffConn) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
