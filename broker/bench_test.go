package broker_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// BenchmarkRoundTrip measures raw MQTT request/response round trips through
// the embedded broker, with the ACL hook on: a requester publishes on a
// context's /req topic, a paho agent (shared subscription, answering from a
// worker goroutine) replies on its /res topic, and the requester waits for
// the reply before it sends the next request. Several requesters run at
// once (RunParallel: GOMAXPROCS*8 of them), each with a context of its own,
// as concurrent MCP sessions would. ns/op is wall time per round trip across
// all of them; roundtrips/s is the throughput.
//
//	inline->paho: the gateway's embedded path (InlineBus requester).
//	paho->paho:   both ends over TCP, as with an external gateway.
func BenchmarkRoundTrip(b *testing.B) {
	for _, qos := range []byte{0, 1} {
		b.Run(fmt.Sprintf("inline->paho/qos%d", qos), func(b *testing.B) { benchInline(b, qos) })
		b.Run(fmt.Sprintf("paho->paho/qos%d", qos), func(b *testing.B) { benchPaho(b, qos) })
	}
}

const benchParallelism = 8

// benchEnv starts a broker and a responding agent at qos.
func benchEnv(b *testing.B, qos byte) (*testEnv, string) {
	b.Helper()
	e := newEnv(b, func(o *broker.Options) {
		o.InlineQoS = qos
		o.Logger = nil // the debug logs of the tests would dominate
	})
	pwa := e.addIdentity(b, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(b, "gw", acl.RolePlatform)
	agent := e.mustConnect(b, "agent1-bench", "agent1", pwa, nil, benchClient)
	startResponder(b, agent, sharedRequests, qos)
	return e, pwp
}

// benchClient lets paho deliver messages without waiting for the previous
// handler; the handlers only hand off.
func benchClient(o *paho.ClientOptions) {
	o.SetOrderMatters(false)
	o.SetMessageChannelDepth(4096)
}

var benchSession atomic.Int64

// benchTopics returns a new context's request topic (to agent1's pool)
// and its reply filter.
func benchTopics() (req, replies string) {
	levels := fmt.Sprintf("bench/u1/s%d/_/_", benchSession.Add(1))
	return requestTopic("agent1", "_", levels), mcpPrefix + "+/+/" + levels + "/res"
}

func benchInline(b *testing.B, qos byte) {
	e, _ := benchEnv(b, qos)
	bus := e.Broker.Bus()
	ctx := testContext(b)
	payload := []byte(`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}}`)

	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, res := benchTopics()
		got := make(chan struct{}, 1)
		if err := bus.Subscribe(ctx, res, func(string, []byte) { got <- struct{}{} }); err != nil {
			b.Error(err)
			return
		}
		defer func() { _ = bus.Unsubscribe(ctx, res) }()
		timeout := time.NewTimer(waitFor)
		defer timeout.Stop()
		for pb.Next() {
			if err := bus.Publish(ctx, req, payload); err != nil {
				b.Error(err)
				return
			}
			timeout.Reset(waitFor)
			select {
			case <-got:
			case <-timeout.C:
				b.Error("no response within", waitFor)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
}

func benchPaho(b *testing.B, qos byte) {
	e, pwp := benchEnv(b, qos)
	payload := []byte(`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}}`)
	gw := e.mustConnect(b, "gw-bench", "gw", pwp, nil, benchClient)

	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, res := benchTopics()
		got := make(chan struct{}, 1)
		tok := gw.Subscribe(res, qos, func(paho.Client, paho.Message) { got <- struct{}{} })
		if !tok.WaitTimeout(waitFor) || tok.Error() != nil {
			b.Error("subscribe:", tok.Error())
			return
		}
		timeout := time.NewTimer(waitFor)
		defer timeout.Stop()
		for pb.Next() {
			// The reply proves delivery; the PUBACK is not waited for.
			gw.Publish(req, qos, false, payload)
			timeout.Reset(waitFor)
			select {
			case <-got:
			case <-timeout.C:
				b.Error("no response within", waitFor)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
}
