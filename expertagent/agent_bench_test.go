package expertagent

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// agentBenchClient stands in for the paho client in BenchmarkAgentDispatch:
// Publish completes at once, as if the broker acknowledged it, so that the
// benchmark measures the Agent's own work per message (decode, queue,
// dispatch, tool, encode) and none of the network's.
type agentBenchClient struct {
	mqtt.Client // unused methods: a call panics (nil)
	published   sync.WaitGroup
}

func (c *agentBenchClient) Publish(_ string, _ byte, _ bool, payload any) mqtt.Token {
	if p, ok := payload.([]byte); !ok || len(p) == 0 {
		panic("agentBenchClient: empty payload")
	}
	c.published.Done()
	return agentDoneToken{}
}

func (c *agentBenchClient) IsConnectionOpen() bool { return false }
func (c *agentBenchClient) Disconnect(uint)        {}

// agentDoneToken is an acknowledged token.
type agentDoneToken struct{}

var agentClosedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (agentDoneToken) Wait() bool                     { return true }
func (agentDoneToken) WaitTimeout(time.Duration) bool { return true }
func (agentDoneToken) Done() <-chan struct{}          { return agentClosedChan }
func (agentDoneToken) Error() error                   { return nil }

// agentBenchMessage is a delivered MQTT message.
type agentBenchMessage struct {
	mqtt.Message
	topic   string
	payload []byte
}

func (m *agentBenchMessage) Topic() string   { return m.topic }
func (m *agentBenchMessage) Payload() []byte { return m.payload }

// BenchmarkAgentDispatch measures the Agent's CPU per tools/call of a
// trivial echo tool, the way the gateway sends it, from the delivery
// callback to the published reply, without the network: onMessage on the
// benchmark goroutine (paho's delivery goroutine in production), a worker
// for the rest. Every request is a fresh payload, as paho delivers them.
func BenchmarkAgentDispatch(b *testing.B) {
	echo := Tool{Name: "echo", Handler: func(_ context.Context, req *CallRequest) (*CallResult, error) {
		var a struct {
			Text *string `json:"text"`
		}
		if err := req.Bind(&a); err != nil {
			return nil, err
		}
		return Text(*a.Text), nil
	}}
	const batch = 64 // requests in flight at once, as with the bench's 32 sessions and more
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", ClientID: "bench-agent", Concurrency: batch})
	if err := a.AddTool(echo); err != nil {
		b.Fatal(err)
	}
	client := &agentBenchClient{}
	stop := agentBenchStart(b, a, client)

	c := Context{PlatformID: "gw-1", UserID: "bench", SessionID: "s-0123456789abcdef", EntityType: NoEntity, EntityID: NoEntity}
	topic := c.RequestTopic()
	deadline := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	payload := func(i int) []byte {
		id := `"k3j4h5g6f7d8s9a0-` + strconv.Itoa(i) + `"`
		return []byte(`{"v":1,"correlationId":` + id + `,"deadline":` + deadline + `,"caller":{"userId":"bench","readOnly":false},` +
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
			a.onMessage(nil, &msgs[i])
		}
		client.published.Wait()
	}
	b.StopTimer()
	stop() // workers done: every counter final
	if st := a.Stats(); st.Responses != uint64(b.N) || st.Dropped+st.Rejected+st.Expired+st.PublishErrors != 0 {
		b.Fatalf("stats %+v after %d requests", st, b.N)
	}
}

// agentBenchStart starts a's workers with client in place of paho, the way
// Run does; stop drains them (tb.Cleanup does too, if stop was not called).
func agentBenchStart(tb testing.TB, a *Agent, client mqtt.Client) (stop func()) {
	tb.Helper()
	if err := a.start(); err != nil {
		tb.Fatal(err)
	}
	serveCtx, stopServe := context.WithCancelCause(context.Background())
	a.serveCtx = serveCtx
	a.queue = make(chan *agentCall, a.opts.Concurrency)
	a.rejects = make(chan *agentCall, a.opts.Concurrency)
	a.client = client
	var workers, rejecter sync.WaitGroup
	for range a.opts.Concurrency {
		workers.Go(a.worker)
	}
	rejecter.Go(a.rejectLoop)
	stop = sync.OnceFunc(func() { a.shutdown(context.Background(), &workers, &rejecter, stopServe) })
	tb.Cleanup(stop)
	return stop
}
