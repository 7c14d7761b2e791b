package requester_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/requester"
)

// A PahoBus given the nodes of a cluster fails over to the next when its
// broker dies, and subscribes there again.
func TestPahoBusFailsOver(t *testing.T) {
	a, b := rqStartBroker(t), rqStartBroker(t) // one platform identity on both
	bus, err := requester.DialPahoBus(rqContext(t), requester.PahoBusOptions{
		BrokerURL: a.URL + "," + b.URL, Username: a.PlatformUser, Password: a.PlatformPassword,
		ConnectTimeout: 5 * time.Second, MaxReconnectInterval: 200 * time.Millisecond, Logger: rqLogger(t, "pahobus"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	c := rqCtx(1)
	got := make(chan string, 16)
	if err := bus.Subscribe(rqContext(t), c.ReplyFilter(), func(_ string, p []byte) { got <- string(p) }); err != nil {
		t.Fatal(err)
	}
	if err := a.Broker.Close(); err != nil { // the node the bus is on dies
		t.Fatal(err)
	}
	topic := c.ReplyTopic(a.AgentUser, "a1")
	rqPoll(t, "a reply through the second node", func() bool {
		ctx, cancel := context.WithTimeout(rqContext(t), 200*time.Millisecond)
		defer cancel()
		_ = b.Broker.Bus().Publish(ctx, topic, []byte("via b"))
		select {
		case p := <-got:
			return p == "via b"
		case <-ctx.Done():
			return false
		}
	})
}
