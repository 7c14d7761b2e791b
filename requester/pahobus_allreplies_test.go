package requester_test

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/requester"
)

// A PahoBus with AllReplies holds one subscription for every context: a
// context's filter only adds its route, a reply to a context without a
// route is dropped, and after a reconnect the one filter is back.
func TestPahoBusAllReplies(t *testing.T) {
	e := rqStartBroker(t)
	c1, c2, c3 := rqCtx(1), rqCtx(2), rqCtx(3) // one platform ID
	bus, err := requester.DialPahoBus(rqContext(t), requester.PahoBusOptions{
		BrokerURL: e.URL, Username: e.PlatformUser, Password: e.PlatformPassword,
		AllReplies:     contract.GatewayReplyFilter(c1.PlatformID),
		ConnectTimeout: 5 * time.Second, MaxReconnectInterval: 200 * time.Millisecond, Logger: rqLogger(t, "pahobus"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	got := make(chan string, 16)
	for _, c := range []contract.Context{c1, c2} {
		if err := bus.Subscribe(rqContext(t), c.ReplyFilter(), func(topic string, _ []byte) { got <- topic }); err != nil {
			t.Fatal(err)
		}
	}
	// Two contexts are subscribed: the broker holds the one filter.
	if n := e.Broker.Stats().Subscriptions; n != 1 {
		t.Fatalf("the broker holds %d subscriptions, want 1 (AllReplies)", n)
	}
	if err := bus.Unsubscribe(rqContext(t), c2.ReplyFilter()); err != nil {
		t.Fatal(err)
	}
	publish := func(c contract.Context) {
		t.Helper()
		if err := e.Broker.Bus().Publish(rqContext(t), c.ReplyTopic(e.AgentUser, "a1"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	// c2 (unsubscribed) and c3 (never subscribed) reach the bus and are
	// dropped there; c1, sent last, is the marker that they came first.
	publish(c2)
	publish(c3)
	publish(c1)
	select {
	case topic := <-got:
		if topic != c1.ReplyTopic(e.AgentUser, "a1") {
			t.Fatalf("delivered %s; want only c1's reply", topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("c1's reply never came")
	}
}
