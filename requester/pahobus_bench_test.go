package requester_test

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/testenv"
)

// benchContexts is how many contexts' reply filters the gateway holds in
// the dispatch benchmark (the 50 000 contexts).
const benchContexts = 50_000

// BenchmarkPahoDispatch delivers one reply at a time, through the embedded
// broker over TCP, to a client holding benchContexts reply filters
// (contract.Context.ReplyFilter): PahoBus (one default handler, a map
// lookup by the reply's context per message) against a plain paho client
// with a handler per subscription (paho's router tries every route,
// splitting its filter, for each message). Both pay the same network round
// trip; the difference is the dispatch.
//
//	go test -run '^$' -bench PahoDispatch -benchtime 200x ./expertagent/
func BenchmarkPahoDispatch(b *testing.B) {
	for _, contexts := range []int{1, benchContexts} {
		for _, kind := range []string{"pahobus-map", "paho-router"} {
			b.Run(fmt.Sprintf("%s/contexts=%d", kind, contexts), func(b *testing.B) {
				e := &rqEnv{testenv.StartBroker(b, testenv.WithLogLevel(logrus.WarnLevel))}
				got := make(chan string, 1)
				filters := make([]string, contexts)
				for i := range filters {
					filters[i] = rqCtx(i).ReplyFilter()
				}
				start := time.Now()
				if kind == "pahobus-map" {
					benchPahoBusSubscribe(b, e, filters, got)
				} else {
					benchPahoRouterSubscribe(b, e, filters, got)
				}
				subscribeTime := time.Since(start)

				pub := benchPublisher(b, e)
				// The message is a reply of a context in the middle of the table.
				topic := rqCtx(contexts/2).ReplyTopic(e.AgentUser, benchPublisherID)
				payload := []byte("{}")
				for b.Loop() {
					pub.Publish(topic, 0, false, payload)
					select {
					case <-got:
					case <-time.After(rqWait):
						b.Fatal("message not delivered")
					}
				}
				// After the loop: b.Loop's first call resets the metrics.
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/msg")
				b.ReportMetric(subscribeTime.Seconds(), "s-to-subscribe-all")
			})
		}
	}
}

func benchPahoBusSubscribe(b *testing.B, e *rqEnv, filters []string, got chan<- string) {
	b.Helper()
	bus := e.pahoBus(b, "bench-bus")
	h := func(topic string, _ []byte) { got <- topic }
	ctx := rqContext(b)
	for _, t := range filters {
		if err := bus.Subscribe(ctx, t, h); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPahoRouterSubscribe(b *testing.B, e *rqEnv, filters []string, got chan<- string) {
	b.Helper()
	c := benchClient(b, e.URL, "bench-router", e.PlatformUser, e.PlatformPassword)
	// One route per subscription, each with its own handler: paho's way.
	for i := 0; i < len(filters); i += 500 {
		batch := map[string]byte{}
		for _, t := range filters[i:min(i+500, len(filters))] {
			batch[t] = 1
		}
		tok := c.SubscribeMultiple(batch, func(_ paho.Client, m paho.Message) { got <- m.Topic() })
		if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			b.Fatalf("subscribe: %v", tok.Error())
		}
	}
}

// benchPublisherID is the client ID of benchPublisher: the instance level
// of the replies it may publish.
const benchPublisherID = "bench-pub"

// benchPublisher is an agent-role client that publishes the replies.
func benchPublisher(b *testing.B, e *rqEnv) paho.Client {
	b.Helper()
	return benchClient(b, e.URL, benchPublisherID, e.AgentUser, e.AgentPassword)
}

// benchClient is a connected plain paho client, disconnected at cleanup.
func benchClient(b *testing.B, url, clientID, user, password string) paho.Client {
	b.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(clientID).
		SetUsername(user).SetPassword(password).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetWriteTimeout(5 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(rqWait) || tok.Error() != nil {
		b.Fatalf("connect %s: %v", clientID, tok.Error())
	}
	b.Cleanup(func() { c.Disconnect(50) })
	return c
}
