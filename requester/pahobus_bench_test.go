package requester_test

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/testenv"
)

// benchContexts is how many exact response subscriptions the gateway
// holds in the dispatch benchmark (the 50 000 contexts).
const benchContexts = 50_000

// BenchmarkPahoDispatch delivers one message at a time, through the
// embedded broker over TCP, to a client holding benchContexts exact
// subscriptions: PahoBus (one default handler, a map lookup per message)
// against a plain paho client with a handler per subscription (paho's
// router tries every route, splitting its filter, for each message). Both
// pay the same network round trip; the difference is the dispatch.
//
//	go test -run '^$' -bench PahoDispatch -benchtime 200x ./expertagent/
func BenchmarkPahoDispatch(b *testing.B) {
	for _, contexts := range []int{1, benchContexts} {
		for _, kind := range []string{"pahobus-map", "paho-router"} {
			b.Run(fmt.Sprintf("%s/contexts=%d", kind, contexts), func(b *testing.B) {
				e := &rqEnv{testenv.StartBroker(b, testenv.WithLogLevel(logrus.WarnLevel))}
				got := make(chan string, 1)
				topics := make([]string, contexts)
				for i := range topics {
					topics[i] = rqCtx(i).ResponseTopic()
				}
				start := time.Now()
				if kind == "pahobus-map" {
					benchPahoBusSubscribe(b, e, topics, got)
				} else {
					benchPahoRouterSubscribe(b, e, topics, got)
				}
				subscribeTime := time.Since(start)

				pub := benchPublisher(b, e)
				// The message goes to a topic in the middle of the table.
				topic := topics[len(topics)/2]
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

func benchPahoBusSubscribe(b *testing.B, e *rqEnv, topics []string, got chan<- string) {
	b.Helper()
	bus := e.pahoBus(b, "bench-bus")
	h := func(topic string, _ []byte) { got <- topic }
	ctx := rqContext(b)
	for _, t := range topics {
		if err := bus.Subscribe(ctx, t, h); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPahoRouterSubscribe(b *testing.B, e *rqEnv, topics []string, got chan<- string) {
	b.Helper()
	c := benchClient(b, e.URL, "bench-router", e.PlatformUser, e.PlatformPassword)
	// One route per subscription, each with its own handler: paho's way.
	for i := 0; i < len(topics); i += 500 {
		batch := map[string]byte{}
		for _, t := range topics[i:min(i+500, len(topics))] {
			batch[t] = 1
		}
		tok := c.SubscribeMultiple(batch, func(_ paho.Client, m paho.Message) { got <- m.Topic() })
		if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			b.Fatalf("subscribe: %v", tok.Error())
		}
	}
}

// benchPublisher is an agent-role client that publishes the responses.
func benchPublisher(b *testing.B, e *rqEnv) paho.Client {
	b.Helper()
	return benchClient(b, e.URL, "bench-pub", e.AgentUser, e.AgentPassword)
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
