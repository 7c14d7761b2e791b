package testenv

import (
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// KillableConn returns a paho connection opener (for
// ClientOptions.SetCustomOpenConnectionFn) that dials TCP, and the function
// that closes the last connection it opened without a DISCONNECT, as a
// crash or a network failure would.
func KillableConn() (open paho.OpenConnectionFunc, kill func()) {
	var (
		mu   sync.Mutex
		conn net.Conn
	)
	open = func(u *url.URL, _ paho.ClientOptions) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		conn = c
		mu.Unlock()
		return c, nil
	}
	kill = func() {
		mu.Lock()
		defer mu.Unlock()
		if conn != nil {
			_ = conn.Close()
		}
	}
	return open, kill
}
