package pahoconn_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/pahoconn"
	"github.com/toolbus/toolbus/internal/testenv"
)

// TestBufferedRoundTrip: a paho client dialled by pahoconn logs in to the
// real broker, subscribes, and receives messages large and small through
// the buffered reads.
func TestBufferedRoundTrip(t *testing.T) {
	e := testenv.StartBroker(t)
	got := make(chan mqtt.Message, 8)
	o := mqtt.NewClientOptions().AddBroker(e.URL).SetClientID("pahoconn-1").
		SetUsername(e.AgentUser).SetPassword(e.AgentPassword).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { got <- m })
	pahoconn.Use(o, e.URL)
	if o.CustomOpenConnectionFn == nil {
		t.Fatal("Use left paho's own dialer for a tcp:// broker")
	}
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })

	ctx := contract.Context{PlatformID: "plat1", UserID: "u1", SessionID: "s1", EntityType: "_", EntityID: "_"}
	if tok := c.Subscribe(contract.RequestFilter(e.AgentUser, contract.AnyInstance), 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	for _, payload := range [][]byte{[]byte("small"), bytes.Repeat([]byte("x"), 1<<20), []byte("after")} {
		if err := e.Broker.Bus().Publish(testenv.Context(t, 10*time.Second), ctx.RequestTopic(e.AgentUser, contract.AnyInstance), payload); err != nil {
			t.Fatalf("publish: %v", err)
		}
		select {
		case m := <-got:
			if !bytes.Equal(m.Payload(), payload) {
				t.Fatalf("got %d bytes, want %d", len(m.Payload()), len(payload))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no message of %d bytes", len(payload))
		}
	}
}

func TestSplitURLs(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://a:1883":                  "tcp://a:1883",
		" tcp://a:1883 , tcp://b:1883 ": "tcp://a:1883|tcp://b:1883",
		"tcp://a:1883,,ssl://b:8883,":   "tcp://a:1883|ssl://b:8883",
		"":                              "",
		" , ":                           "",
	} {
		if got := strings.Join(pahoconn.SplitURLs(in), "|"); got != want {
			t.Errorf("SplitURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

// The buffered dialer serves a list of tcp:// brokers; one other scheme in
// the list leaves them all to paho's own (o has one dialer for all).
func TestUseWithSeveralBrokers(t *testing.T) {
	o := mqtt.NewClientOptions()
	pahoconn.Use(o, "tcp://a:1883", "mqtt://b:1883")
	if o.CustomOpenConnectionFn == nil {
		t.Error("tcp:// brokers only: no dialer set")
	}
	o = mqtt.NewClientOptions()
	pahoconn.Use(o, "tcp://a:1883", "ssl://b:8883")
	if o.CustomOpenConnectionFn != nil {
		t.Error("a dialer set for a list with an ssl:// broker")
	}
}

func TestUseKeepsPahoDialerForOtherSchemes(t *testing.T) {
	for _, u := range []string{"ssl://127.0.0.1:8883", "ws://127.0.0.1:80/mqtt", "unix:///tmp/mqtt.sock", "::"} {
		o := mqtt.NewClientOptions()
		pahoconn.Use(o, u)
		if o.CustomOpenConnectionFn != nil {
			t.Errorf("Use(%q) set a dialer", u)
		}
	}
}
