package expertagent_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/requester"
)

// BenchmarkAgentRoundTrip: tools/call of a trivial echo through the
// embedded broker to a real Agent over TCP and back (the gateway's
// Requester on the inline bus): sec/op is the whole round trip, on one
// machine.
func BenchmarkAgentRoundTrip(b *testing.B) {
	e := agStartBroker(b)
	a := expertagent.NewAgent(e.agentOptions(b, expertagent.AgentOptions{Name: "rt"}))
	if err := a.AddTool(agEchoTool()); err != nil {
		b.Fatal(err)
	}
	agRun(b, a)
	r := requester.New(e.Broker.Bus(), requester.Options{})
	if err := r.Start(agContext(b)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(agContext(b)) })
	args := json.RawMessage(`{"text":"hello"}`)
	var seq atomic.Int64
	ctx := agContext(b)
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := contract.Context{PlatformID: "bench", UserID: "u", SessionID: fmt.Sprint("s", seq.Add(1)),
			EntityType: contract.NoEntity, EntityID: contract.NoEntity}
		for pb.Next() {
			if _, err := r.CallTool(ctx, c, e.AgentUser, nil, "echo", args, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
