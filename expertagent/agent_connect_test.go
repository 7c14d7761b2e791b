package expertagent_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
)

// warnings collects the messages of the warnings and infos a logger writes.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnings) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel, logrus.InfoLevel} }

func (h *warnings) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, e.Message)
	h.mu.Unlock()
	return nil
}

func (h *warnings) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// An agent started before its broker keeps trying, logging each failure,
// and serves once the broker is up; with ConnectRetry it gives up after
// that long.
func TestAgentConnectRetry(t *testing.T) {
	e := agStartBroker(t)
	if err := e.Broker.Close(); err != nil { // the broker is not up yet
		t.Fatal(err)
	}
	log := testenv.Logger(t, "agent")
	warned := &warnings{}
	log.Logger.AddHook(warned)
	r := agRunNoWait(t, expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{Logger: log})))
	agPoll(t, "a warning that the first connection failed", func() bool {
		return slices.Contains(warned.all(), "cannot connect to the broker; trying again")
	})
	e.Restart(t)
	select {
	case <-r.Ready():
	case err := <-r.done:
		t.Fatalf("Run = %v before the broker came up", err)
	case <-time.After(3 * agWait):
		t.Fatal("the agent did not connect once the broker was up")
	}
	// A later loss: reconnecting, then reconnected, both said.
	e.Restart(t)
	agPoll(t, "reconnecting, then reconnected, logged", func() bool {
		msgs := warned.all()
		lost := slices.Index(msgs, "connection to the broker lost; reconnecting")
		return lost >= 0 && slices.Contains(msgs[lost:], "reconnected to the broker")
	})

	t.Run("gives up", func(t *testing.T) {
		o := e.agentOptions(t, expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1", ConnectRetry: 300 * time.Millisecond})
		err := expertagent.NewAgent(o).Run(agContext(t))
		if !errors.Is(err, expertagent.ErrAgentConnect) || !strings.Contains(err.Error(), "gave up after 300ms") {
			t.Errorf("Run = %v, want ErrAgentConnect after 300ms of tries", err)
		}
	})
}

// With the nodes of a cluster in BrokerURL, an agent whose broker dies
// fails over to the next one and serves there: announced online, and
// answering requests.
func TestAgentFailsOver(t *testing.T) {
	a, b := agStartBroker(t), agStartBroker(t) // one identity, one password on both
	online := make(chan contract.Presence, 16)
	if err := b.Broker.Bus().Subscribe(agContext(t), contract.PresenceTopic(b.AgentUser, "failover-1"), func(_ string, p []byte) {
		var pr contract.Presence
		if json.Unmarshal(p, &pr) == nil && pr.Status == contract.StatusOnline {
			online <- pr
		}
	}); err != nil {
		t.Fatal(err)
	}
	a.startAgent(t, expertagent.AgentOptions{ClientID: "failover-1", BrokerURL: a.URL + ", " + b.URL}, agEchoTool())
	if err := a.Broker.Close(); err != nil { // the node the agent is on dies
		t.Fatal(err)
	}
	agRecv(t, online, "online presence on the second node")
	c := b.newCaller(t)
	res := agDecodeResult(t, c.call(t, "tools/call", agCallParams("echo", map[string]string{"text": "still here"}, nil)))
	if res.IsError || len(res.Content) != 1 || res.Content[0]["text"] != "still here" {
		t.Errorf("echo on the second node = %+v", res)
	}
}
