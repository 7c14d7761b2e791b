package expertagent_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
)

// Changed publishes the online presence again with a since later than
// the last, however quick the changes, and only while the agent serves.
func TestAgentChanged(t *testing.T) {
	e := agStartBroker(t)
	a := expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{ClientID: "changer-1"}))
	if err := a.Changed(agContext(t)); !errors.Is(err, expertagent.ErrAgentNotServing) {
		t.Errorf("Changed before Run = %v, want ErrAgentNotServing", err)
	}
	presence := make(chan contract.Presence, 16)
	if err := e.Broker.Bus().Subscribe(agContext(t), contract.PresenceTopic(e.AgentUser, "changer-1"), func(_ string, b []byte) {
		var p contract.Presence
		if json.Unmarshal(b, &p) == nil {
			presence <- p
		}
	}); err != nil {
		t.Fatal(err)
	}
	r := agRun(t, a)
	last := agRecv(t, presence, "online presence").Since
	for range 3 {
		if err := a.Changed(agContext(t)); err != nil {
			t.Fatal(err)
		}
		p := agRecv(t, presence, "presence after Changed")
		if p.Status != contract.StatusOnline || p.Since <= last {
			t.Fatalf("presence after Changed %+v, want online with a since after %d", p, last)
		}
		last = p.Since
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := a.Changed(agContext(t)); !errors.Is(err, expertagent.ErrAgentNotServing) {
		t.Errorf("Changed after Run = %v, want ErrAgentNotServing", err)
	}
}
