package expertagent

import (
	"bufio"
	"net"
	"net/url"
	"os"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// agentReadBufferSize is the read buffer of the Agent's TCP connection: a
// few requests' worth, so that one read syscall picks up every packet that
// arrived together.
const agentReadBufferSize = 16 << 10

// agentOpenConnection returns paho's connection function for brokerURL if
// the Agent can open that connection itself, nil to leave it to paho.
//
// paho reads every packet straight from the socket, the fixed header one
// byte at a time: four read syscalls for a request, three for each PUBACK,
// a quarter of the agent's CPU under load. Over plain TCP the Agent
// therefore dials itself, as paho would, and hands paho the connection
// behind a read buffer. TLS and WebSocket connections read from buffers of
// their own already; with a proxy configured (ALL_PROXY, which paho
// honours) paho dials too.
func agentOpenConnection(brokerURL string) mqtt.OpenConnectionFunc {
	u, err := url.Parse(brokerURL)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") {
		return nil
	}
	if os.Getenv("ALL_PROXY") != "" || os.Getenv("all_proxy") != "" {
		return nil
	}
	return func(uri *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
		d := o.Dialer
		if d == nil { // paho's own fallback
			d = &net.Dialer{Timeout: 30 * time.Second}
		}
		conn, err := d.Dial("tcp", uri.Host)
		if err != nil {
			return nil, err
		}
		return &agentBufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, agentReadBufferSize)}, nil
	}
}

// agentBufferedConn is a connection whose reads go through a buffer. Only
// paho's one reader goroutine reads (first the CONNACK, then every packet),
// so the buffer needs no lock; writes, deadlines and Close go straight to
// the connection.
type agentBufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *agentBufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
