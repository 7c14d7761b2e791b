package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/requester"
)

// Over the real broker: an instance that promised to repeat its presence
// and fell silent (still connected, so no Will: as when its broker node
// dies) is taken for gone, and the call waiting for it fails with
// ErrNoAgent instead of waiting for its deadline.
func TestRequesterExpiresSilentInstance(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute})
	agent := e.raw(t, rqRawOpts{clientID: "quiet-1"})
	agent.serve(t)
	p, _ := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: "quiet-1", Since: time.Now().UnixMilli(), Interval: 100})
	agent.publish(t, contract.PresenceTopic(e.AgentUser, "quiet-1"), true, p)
	rqPoll(t, "the agent online", func() bool { return slices.Contains(r.OnlineAgents(context.Background()), e.AgentUser) })

	done := rqGo(func() error {
		_, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		return err
	})
	agent.nextRequest(t) // it got the call, and says nothing more
	if err := rqRecv(t, done); !errors.Is(err, requester.ErrNoAgent) {
		t.Fatalf("the call to a silent instance ended with %v, want ErrNoAgent", err)
	}
	if slices.Contains(r.OnlineAgents(context.Background()), e.AgentUser) {
		t.Error("the silent agent is still online")
	}
}
