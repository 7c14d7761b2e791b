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
	"strings"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/net/proxy"
)

// Use sets o to dial the brokers at rawURLs with Dial when every one's
// scheme is tcp:// (or mqtt://); otherwise (TLS, WebSocket, unix among
// them) they all keep paho's own dialer, which o uses for every broker: a
// TLS connection already reads whole records.
func Use(o *mqtt.ClientOptions, rawURLs ...string) {
	for _, raw := range rawURLs {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") {
			return
		}
	}
	if len(rawURLs) > 0 {
		o.SetCustomOpenConnectionFn(Dial)
	}
}

// SplitURLs reads a broker URL option: one URL, or several separated by
// commas, which a paho client tries in order at each connection attempt
// (the nodes of a cluster, say). Spaces around each are dropped, and empty
// ones left out.
func SplitURLs(s string) []string {
	var urls []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
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
