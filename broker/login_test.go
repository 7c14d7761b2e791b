package broker_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	pahopackets "github.com/eclipse/paho.mqtt.golang/packets"
	mochipk "github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/internal/testenv"
)

// refusals collects the reasons of the refused logins the broker reports.
type refusals struct {
	mu      sync.Mutex
	reasons []string
}

func (r *refusals) event(ev broker.Event) {
	if ev.Kind == broker.EventLoginRefused {
		r.mu.Lock()
		r.reasons = append(r.reasons, ev.Username+": "+ev.Err.Error())
		r.mu.Unlock()
	}
}

func (r *refusals) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reasons) == 0 {
		return ""
	}
	return r.reasons[len(r.reasons)-1]
}

// After MaxFailedLogins wrong passwords, a username's next login is
// refused without the KDF, even with the right password; other usernames
// still log in, and a client whose login the cache knows is never held
// back.
func TestFailedLoginsThrottled(t *testing.T) {
	seen := &refusals{}
	e := newEnv(t, func(o *broker.Options) {
		o.MaxFailedLogins, o.FailedLoginRefill = 3, time.Hour
		o.Events = seen.event
	})
	pw1 := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pw2 := e.addIdentity(t, "agent2", acl.RoleExpertAgent)
	pw3 := e.addIdentity(t, "agent3", acl.RoleExpertAgent)
	e.mustConnect(t, "agent3-a", "agent3", pw3, nil) // agent3's login is in the cache now

	for _, user := range []string{"agent1", "agent3"} {
		for i := range 3 {
			if c, err := e.connect(t, fmt.Sprintf("%s-bad%d", user, i), user, "wrong-password", nil); err == nil {
				c.Disconnect(0)
				t.Fatalf("%s logged in with a wrong password", user)
			}
			if got, want := seen.last(), user+": bad credentials"; got != want {
				t.Fatalf("refusal %q, want %q", got, want)
			}
		}
	}
	if c, err := e.connect(t, "agent1-b", "agent1", pw1, nil); err == nil {
		c.Disconnect(0)
		t.Error("agent1 logged in after 3 failed logins in a row")
	} else if got, want := seen.last(), "agent1: too many failed logins"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	e.mustConnect(t, "agent2-a", "agent2", pw2, nil) // another username, same source: 6 of 9 spent
	e.mustConnect(t, "agent3-b", "agent3", pw3, nil) // the cache knows it
}

// A client whose login the cache knows logs in while slow password
// guesses hold every KDF slot: it does not queue behind them.
func TestCachedLoginSkipsTheQueue(t *testing.T) {
	// A deliberately slow KDF: each guess holds its slot for a long while.
	e := &testEnv{testenv.StartBroker(t, testenv.WithoutIdentities(), testenv.WithHashIterations(300_000),
		testenv.WithLogLevel(logrus.InfoLevel), testenv.WithOptions(func(o *broker.Options) { o.ConnectTimeout = time.Minute }))}
	pw := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	e.mustConnect(t, "agent1-a", "agent1", pw, nil) // pays the KDF once; cached from now on

	var guessed atomic.Int64
	var wg sync.WaitGroup
	base := e.Store.KDFRuns()
	procs := runtime.GOMAXPROCS(0)
	for i := range 2*procs + 2 { // more guesses than the broker lets authenticate at once
		wg.Go(func() {
			if c, err := e.connect(t, fmt.Sprintf("guess-%d", i), "agent1", fmt.Sprintf("guess-%d", i), nil); err == nil {
				c.Disconnect(0)
			}
			guessed.Add(1)
		})
	}
	t.Cleanup(wg.Wait)
	testenv.Poll(t, waitFor, "the guesses in the KDF", func() bool { return e.Store.KDFRuns() >= base+int64(procs) })
	e.mustConnect(t, "agent1-b", "agent1", pw, nil)
	if n := guessed.Load(); n > 0 {
		t.Errorf("the cached login came back after %d guesses: it waited behind them", n)
	}
}

// dialFrom is a paho option that connects from the loopback address src.
func dialFrom(src string) clientOption {
	return func(o *paho.ClientOptions) {
		o.SetDialer(&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: waitFor})
	}
}

// Wrong passwords from one address do not lock the username out for
// another address (whose login the cache does not know): failures count
// per (username, source). The guesser's own address is held back, and
// told so as what it is, "connection rate exceeded" (MQTT 5) or "server
// unavailable" (3.1.1), not "bad user name or password", for a known and
// an unknown username alike.
func TestFailedLoginsDoNotLockOutOthers(t *testing.T) {
	seen := &refusals{}
	e := newEnv(t, func(o *broker.Options) {
		o.MaxFailedLogins, o.FailedLoginRefill = 3, time.Hour
		o.Events = seen.event
	})
	pw := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	for _, user := range []string{"agent1", "nobody"} {
		for i := range 6 { // twice what the username may fail
			if c, err := e.connect(t, fmt.Sprintf("guess-%s-%d", user, i), user, "wrong-password", nil, dialFrom("127.0.0.2")); err == nil {
				c.Disconnect(0)
				t.Fatalf("%s logged in with a wrong password", user)
			}
		}
	}

	// First, while agent1's login is not in the cache (which lets in
	// whoever gives the right password, from anywhere).
	for _, user := range []string{"agent1", "nobody"} {
		t.Run("the guesser's address/"+user, func(t *testing.T) {
			_, err := e.connect(t, "agent1-b", user, pw, nil, dialFrom("127.0.0.2"))
			if !errors.Is(err, pahopackets.ErrorRefusedServerUnavailable) {
				t.Errorf("3.1.1: %v, want %v", err, pahopackets.ErrorRefusedServerUnavailable)
			}
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: waitFor}
			conn, err := d.Dial("tcp", e.Broker.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
			t.Cleanup(func() { _ = conn.Close() })
			if ack := c.connect("agent1-c", user, pw, 30); ack.ReasonCode != mochipk.ErrConnectionRateExceeded.Code {
				t.Errorf("MQTT 5: CONNACK %#x %q, want %#x", ack.ReasonCode, ack.Properties.ReasonString, mochipk.ErrConnectionRateExceeded.Code)
			}
		})
	}

	t.Run("another address", func(t *testing.T) {
		if _, err := e.connect(t, "agent1-a", "agent1", pw, nil, dialFrom("127.0.0.3")); err != nil {
			t.Fatalf("the right password from another address: %v (%s)", err, seen.last())
		}
	})
}

// Guesses for one username spread over many addresses, each failing no
// more than its own buckets allow, spend the username's bucket: then every
// new address is refused at once, without the KDF, until it refills.
func TestFailedLoginsSpreadOverAddresses(t *testing.T) {
	seen := &refusals{}
	e := newEnv(t, func(o *broker.Options) {
		o.MaxFailedLogins, o.FailedLoginRefill = 1, time.Hour // the username's bucket: 10
		o.Events = seen.event
	})
	pw := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	for i := range 10 {
		src := fmt.Sprintf("127.0.0.%d", 10+i)
		if c, err := e.connect(t, "guess-"+src, "agent1", "wrong-password", nil, dialFrom(src)); err == nil {
			c.Disconnect(0)
			t.Fatalf("logged in with a wrong password from %s", src)
		}
		if got, want := seen.last(), "agent1: bad credentials"; got != want {
			t.Fatalf("refusal from %s %q, want %q", src, got, want)
		}
	}
	runs := e.Store.KDFRuns()
	if c, err := e.connect(t, "agent1-a", "agent1", pw, nil, dialFrom("127.0.0.20")); err == nil {
		c.Disconnect(0)
		t.Fatal("the right password from a new address got in with the username's bucket spent")
	}
	if got, want := seen.last(), "agent1: too many failed logins"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	if n := e.Store.KDFRuns() - runs; n != 0 {
		t.Errorf("the refused login ran the KDF %d times", n)
	}
}
