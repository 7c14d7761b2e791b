// Package pahoconn dials tcp:// MQTT brokers for paho.mqtt.golang clients
// with reads that go through a buffer. paho reads each packet's fixed
// header a byte at a time, a read system call each, straight from the
// connection it is given (docs/upstream.md, paho 1); a buffer makes that
// one read per packet, or fewer.
package pahoconn

import (
	"bufio"
	"net"
	"net/url"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/net/proxy"
)

// Use sets o to dial the broker at rawURL with Dial when its scheme is
// tcp:// (or mqtt://); other schemes (TLS, WebSocket, unix) keep paho's
// own dialer: a TLS connection already reads whole records.
func Use(o *mqtt.ClientOptions, rawURL string) {
	if u, err := url.Parse(rawURL); err == nil && (u.Scheme == "tcp" || u.Scheme == "mqtt") {
		o.SetCustomOpenConnectionFn(Dial)
	}
}

// Dial connects to u's host as paho does for tcp:// (through ALL_PROXY
// when it is set, within o's ConnectTimeout) and returns a connection
// whose reads are buffered. It is a paho OpenConnectionFunc.
func Dial(u *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
	c, err := proxy.FromEnvironmentUsing(&net.Dialer{Timeout: o.ConnectTimeout}).Dial("tcp", u.Host)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, r: bufio.NewReader(c)}, nil
}

// conn is a net.Conn whose reads go through r.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func (c *conn) Read(p []byte) (int, error) { return c.r.Read(p) }
