package broker

import (
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/sirupsen/logrus"
)

// wsListener serves MQTT over WebSocket (subprotocol "mqtt", any path) on a
// net.Listener the broker has bound itself. mochi's own WebSocket listener
// binds inside Serve, so a bind error is lost and ":0" never tells its port.
type wsListener struct {
	ln      net.Listener
	tracker *connTracker
	srv     *http.Server
	upg     websocket.Upgrader
	// maxPacket bounds one WebSocket message: an MQTT packet may span
	// messages, but no message needs to be larger than the largest packet.
	maxPacket uint32

	mu        sync.Mutex
	closed    bool
	serving   bool
	served    chan struct{}
	establish listeners.EstablishFn
}

var _ listeners.Listener = (*wsListener)(nil)

func newWSListener(id string, ln net.Listener, lim connLimits, maxPacket uint32, srv *mqtt.Server, entry *logrus.Entry) *wsListener {
	connectTimeout := lim.connectTimeout
	l := &wsListener{
		ln:        ln,
		tracker:   newConnTracker(id, lim, srv, entry),
		maxPacket: maxPacket,
		served:    make(chan struct{}),
		upg: websocket.Upgrader{
			HandshakeTimeout: connectTimeout,
			Subprotocols:     []string{"mqtt"},
			// Clients log in with MQTT credentials, never with cookies, so
			// a cross-origin page gains nothing a direct client has not.
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(l.handle),
		ReadHeaderTimeout: connectTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(debugWriter{l.tracker.log}, "", 0),
	}
	return l
}

func (l *wsListener) ID() string                { return l.tracker.id }
func (l *wsListener) Address() string           { return l.ln.Addr().String() }
func (l *wsListener) Protocol() string          { return "ws" }
func (l *wsListener) Init(_ *slog.Logger) error { return nil }

func (l *wsListener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.serving = true
	l.establish = establish
	l.mu.Unlock()
	defer close(l.served)

	if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		l.tracker.log.WithError(err).Error("websocket listener stopped")
	}
}

func (l *wsListener) handle(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	establish := l.establish
	l.mu.Unlock()
	c, err := l.upg.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered the request with the error
	}
	c.SetReadLimit(int64(l.maxPacket) + 8) // + the fixed header
	l.tracker.run(&wsConn{Conn: c.UnderlyingConn(), ws: c}, establish)
}

// Close stops the HTTP server, disconnects the logged-in clients of this
// listener (disconnectClients, in place of mochi's CloseFn), closes what is
// left and waits for every goroutine.
func (l *wsListener) Close(_ listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	serving := l.serving
	l.mu.Unlock()

	// Close (not Shutdown): upgraded connections are hijacked, so the
	// server no longer tracks them; the tracker does.
	_ = l.srv.Close()
	_ = l.ln.Close()
	l.tracker.disconnectClients()
	l.tracker.close()
	if serving {
		<-l.served
	}
}

// wsConn is one MQTT byte stream over WebSocket binary messages: an MQTT
// packet may span messages and a message may hold several packets.
type wsConn struct {
	net.Conn  // the hijacked connection: deadlines, addresses
	endSignal // the takeover hook's: the connection starts to end
	ws        *websocket.Conn
	r         io.Reader
}

func (c *wsConn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *wsConn) read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errors.New("websocket: MQTT needs binary messages")
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

// Close tells the takeover hook of the end first (see endConn.Close).
func (c *wsConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// Write sends p as one binary message. mochi serialises writes per client,
// which is the one-writer-at-a-time rule of gorilla/websocket.
func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// debugWriter sends net/http's server log lines (TLS handshake errors and
// the like) to logrus at debug level.
type debugWriter struct{ log *logrus.Entry }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug(string(p))
	return len(p), nil
}
