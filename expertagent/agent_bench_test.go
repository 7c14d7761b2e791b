package expertagent

import (
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/mcp"

	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// agentBenchLink stands in for the broker link in BenchmarkAgentDispatch:
// publish completes at once, as if the broker acknowledged it, so that the
// benchmark measures the Agent's own work per message (decode, queue,
// dispatch, tool, encode) and none of the network's.
type agentBenchLink struct {
	published sync.WaitGroup
}

func (c *agentBenchLink) publish(_ context.Context, _ string, payload []byte, _ bool) error {
	if len(payload) == 0 {
		panic("agentBenchLink: empty payload")
	}
	c.published.Done()
	return nil
}

func (c *agentBenchLink) connect(context.Context) error                { panic("unused") }
func (c *agentBenchLink) subscribe(context.Context, ...string) error   { panic("unused") }
func (c *agentBenchLink) unsubscribe(context.Context, ...string) error { panic("unused") }
func (c *agentBenchLink) isOpen() bool                                 { return false } // no claims in the benchmark
func (c *agentBenchLink) close()                                       {}

// agentBenchMessage is a delivered MQTT message.
type agentBenchMessage struct {
	topic   string
	payload []byte
}

// BenchmarkAgentDispatch measures the Agent's CPU per tools/call of a
// trivial echo tool, the way the gateway sends it, from the delivery
// callback to the published reply, without the network: onMessage on the
// benchmark goroutine (paho's router in production), a worker
// for the rest. Every request is a fresh payload, as paho delivers them.
func BenchmarkAgentDispatch(b *testing.B) {
	echo := Tool{
		Tool: mcp.Tool{
			Name: "echo",
		},
		Handler: func(_ context.Context, req *CallRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Text *string `json:"text"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			return mcp.TextResult(*a.Text), nil
		},
	}
	const batch = 64 // requests in flight at once, as with the bench's 32 sessions and more
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", Username: "bench", ClientID: "bench-agent", Concurrency: batch})
	if err := a.AddTool(echo); err != nil {
		b.Fatal(err)
	}
	client := &agentBenchLink{}
	stop := agentBenchStart(b, a, client)

	c := contract.Context{PlatformID: "gw-1", UserID: "bench", SessionID: "s-0123456789abcdef", EntityType: contract.NoEntity, EntityID: contract.NoEntity}
	topic := c.RequestTopic("bench", contract.AnyInstance)
	deadline := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	payload := func(i int) []byte {
		id := `"k3j4h5g6f7d8s9a0-` + strconv.Itoa(i) + `"`
		return []byte(`{"v":2,"correlationId":` + id + `,"deadline":` + deadline + `,"caller":{"userId":"bench","readOnly":false},` +
			`"message":{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"xxxxxxxxxxxxxxxx"}}}}`)
	}
	msgs := make([]agentBenchMessage, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		b.StopTimer()
		msgs = msgs[:min(batch, b.N-n)]
		for i := range msgs {
			msgs[i] = agentBenchMessage{topic: topic, payload: payload(n + i)}
		}
		client.published.Add(len(msgs))
		b.StartTimer()
		for i := range msgs {
			a.onMessage(msgs[i].topic, msgs[i].payload)
		}
		client.published.Wait()
	}
	b.StopTimer()
	stop() // workers done: every counter final
	if st := a.Stats(); st.Responses != uint64(b.N) || st.Dropped+st.Rejected+st.Expired+st.PublishErrors != 0 {
		b.Fatalf("stats %+v after %d requests", st, b.N)
	}
}

// agentBenchStart starts a's workers with link in place of the broker's, the way
// Run does; stop drains them (tb.Cleanup does too, if stop was not called).
func agentBenchStart(tb testing.TB, a *Agent, link agentLink) (stop func()) {
	tb.Helper()
	if err := a.start(); err != nil {
		tb.Fatal(err)
	}
	serveCtx, stopServe := context.WithCancelCause(context.Background())
	a.serveCtx = serveCtx
	a.queue = make(chan *agentCall, a.opts.Concurrency)
	a.rejects = make(chan *agentCall, a.opts.Concurrency)
	a.link = link
	var workers, rejecter sync.WaitGroup
	for range a.opts.Concurrency {
		workers.Go(a.worker)
	}
	rejecter.Go(a.rejectLoop)
	stop = sync.OnceFunc(func() { a.shutdown(context.Background(), &workers, &rejecter, stopServe) })
	tb.Cleanup(stop)
	return stop
}
