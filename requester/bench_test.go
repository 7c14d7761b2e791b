package requester_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/requester"
)

// rqBenchResponder is a minimal expert agent instance on raw paho, logged
// in as e.AgentUser: it answers every request for its pool on its own
// reply topic of the request's context, from worker goroutines (never from
// the paho handler). An envelope gets an envelope with an empty result;
// anything else is echoed as is (the raw MQTT baseline).
func (e *rqEnv) benchResponder(tb testing.TB, clientID string, workers int) {
	tb.Helper()
	jobs := make(chan rqMsg, 4096)
	done := make(chan struct{})
	var wg sync.WaitGroup
	c := paho.NewClient(paho.NewClientOptions().
		AddBroker(e.URL).
		SetClientID(clientID).
		SetUsername(e.AgentUser).
		SetPassword(e.AgentPassword).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			select {
			case jobs <- rqMsg{topic: m.Topic(), payload: m.Payload()}:
			case <-done:
			}
		}))
	if tok := c.Connect(); !tok.WaitTimeout(rqWait) || tok.Error() != nil {
		tb.Fatalf("responder connect: %v", tok.Error())
	}
	pool := contract.RequestFilter(e.AgentUser, contract.AnyInstance)
	if tok := c.Subscribe(pool, 1, nil); !tok.WaitTimeout(rqWait) || tok.Error() != nil || tok.(*paho.SubscribeToken).Result()[pool] >= 0x80 {
		tb.Fatalf("responder subscribe: %v", tok.Error())
	}
	// A request topic is <prefix><agent>/_/<context>/req; the reply goes to
	// <prefix><agent>/<clientID>/<context>/res.
	reqPrefix := contract.TopicPrefix + e.AgentUser + "/" + contract.AnyInstance + "/"
	resPrefix := contract.TopicPrefix + e.AgentUser + "/" + clientID + "/"
	p, _ := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: clientID})
	if tok := c.Publish(contract.PresenceTopic(e.AgentUser, clientID), 1, true, p); !tok.WaitTimeout(rqWait) || tok.Error() != nil {
		tb.Fatalf("responder presence: %v", tok.Error())
	}
	for range workers {
		wg.Go(func() {
			for {
				select {
				case m := <-jobs:
					reply := m.payload
					if env, err := contract.DecodeEnvelope(m.payload); err == nil {
						if strings.Contains(string(env.Message), `"notifications/`) {
							continue
						}
						out := contract.Envelope{CorrelationID: env.CorrelationID, Message: json.RawMessage(rqResult(env.CorrelationID, `{"content":[]}`))}
						reply, _ = out.Encode()
					}
					levels := strings.TrimSuffix(strings.TrimPrefix(m.topic, reqPrefix), contract.Request)
					c.Publish(resPrefix+levels+contract.Reply, 1, false, reply)
				case <-done:
					return
				}
			}
		})
	}
	tb.Cleanup(func() {
		close(done)
		wg.Wait()
		c.Disconnect(50)
	})
}

// rqRawGateway is the raw MQTT baseline's gateway side: it publishes on a
// context's request topic for the agent and waits for the echo through the
// context's reply filter, over the same bus the Requester would use.
type rqRawGateway struct {
	bus   requester.Bus
	agent string
	mu    sync.Mutex
	in    map[string]chan []byte // by the context's levels
}

// levelsOf returns the context levels of a reply topic:
// <prefix><agent>/<instance>/<levels>/res.
func levelsOf(topic string) string {
	rest := strings.TrimPrefix(topic, contract.TopicPrefix)
	for range 2 {
		_, rest, _ = strings.Cut(rest, "/")
	}
	return strings.TrimSuffix(rest, "/"+contract.Reply)
}

func (g *rqRawGateway) handler(topic string, payload []byte) {
	g.mu.Lock()
	ch := g.in[levelsOf(topic)]
	g.mu.Unlock()
	if ch != nil {
		select {
		case ch <- payload:
		default:
		}
	}
}

func (g *rqRawGateway) open(tb testing.TB, c contract.Context) chan []byte {
	tb.Helper()
	ch := make(chan []byte, 1)
	g.mu.Lock()
	g.in[c.Levels()] = ch
	g.mu.Unlock()
	if err := g.bus.Subscribe(rqContext(tb), c.ReplyFilter(), g.handler); err != nil {
		tb.Fatal(err)
	}
	return ch
}

func (g *rqRawGateway) roundTrip(ctx context.Context, c contract.Context, ch chan []byte, payload []byte) error {
	if err := g.bus.Publish(ctx, c.RequestTopic(g.agent, contract.AnyInstance), payload); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BenchmarkRequesterRoundTrip measures one tools/call through the
// Requester (inline bus and PahoBus over TCP), beside a raw MQTT
// publish->subscribe round trip on the same broker and the same responder,
// serially (latency) and from 16 goroutines on 16 contexts (throughput).
func BenchmarkRequesterRoundTrip(b *testing.B) {
	e := rqStartBroker(b)
	e.benchResponder(b, "bench-responder", 8)
	args := json.RawMessage(`{"text":"hello"}`)
	// A raw payload about the size of a tools/call envelope.
	rawPayload := []byte(`{"v":0,"x":"` + strings.Repeat("x", 200) + `"}`)

	var ctxSeq atomic.Int64
	nextCtx := func() contract.Context {
		i := int(ctxSeq.Add(1))
		c := rqCtx(i)
		c.PlatformID = "bench"
		return c
	}

	for _, kind := range []busKind{busInline, busPaho} {
		bus := e.bus(b, kind)
		g := &rqRawGateway{bus: bus, agent: e.AgentUser, in: map[string]chan []byte{}}
		b.Run(fmt.Sprintf("raw-mqtt/%s/serial", kind), func(b *testing.B) {
			c := nextCtx()
			ch := g.open(b, c)
			ctx := rqContext(b)
			for b.Loop() {
				if err := g.roundTrip(ctx, c, ch, rawPayload); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("raw-mqtt/%s/parallel16", kind), func(b *testing.B) {
			b.SetParallelism(16)
			ctx := rqContext(b)
			b.RunParallel(func(pb *testing.PB) {
				c := nextCtx()
				ch := g.open(b, c)
				for pb.Next() {
					if err := g.roundTrip(ctx, c, ch, rawPayload); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})

		r := requester.New(bus, requester.Options{})
		if err := r.Start(rqContext(b)); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("requester/%s/serial", kind), func(b *testing.B) {
			c := nextCtx()
			ctx := rqContext(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.CallTool(ctx, c, e.AgentUser, nil, "echo", args, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("requester/%s/parallel16", kind), func(b *testing.B) {
			b.SetParallelism(16)
			ctx := rqContext(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c := nextCtx()
				for pb.Next() {
					if _, err := r.CallTool(ctx, c, e.AgentUser, nil, "echo", args, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		if err := r.Close(rqContext(b)); err != nil {
			b.Fatal(err)
		}
	}
}
