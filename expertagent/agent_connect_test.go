package expertagent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// An agent given no Logger is not silent: a wrong password (which it
// retries for ever) shows on standard error, with the broker's reason in
// words. The agent runs in a child process (this test binary again), whose
// standard error the test reads.
func TestAgentDefaultLoggerSpeaks(t *testing.T) {
	if url := os.Getenv("EXPERTAGENT_TEST_CHILD_BROKER"); url != "" {
		// The child: bounded, in case the parent dies before it kills
		// it, and ending before the parent's bound, so that a silent
		// child fails the test with what it wrote.
		ctx, cancel := context.WithTimeout(context.Background(), 2*agWait)
		defer cancel()
		err := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: url, Username: os.Getenv("EXPERTAGENT_TEST_CHILD_USER"), Password: "wrong"}).Run(ctx)
		fmt.Println("Run:", err)
		return
	}
	e := agStartBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*agWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAgentDefaultLoggerSpeaks$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EXPERTAGENT_TEST_CHILD_BROKER="+e.URL, "EXPERTAGENT_TEST_CHILD_USER="+e.AgentUser)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// The lines the child wrote before the one sought, or nil once found.
	seen := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "level=warning") && strings.Contains(line, "cannot connect to the broker; trying again") &&
				strings.Contains(line, "bad user name or password") {
				seen <- nil
				return
			}
			lines = append(lines, line)
		}
		seen <- append(lines, "(end of the child's standard error)")
	}()
	select {
	case lines := <-seen:
		if lines != nil {
			t.Fatalf("an agent without a Logger wrote nothing on standard error about its refused login; it wrote:\n%s", strings.Join(lines, "\n"))
		}
	case <-ctx.Done():
		t.Fatal("no warning on standard error in time")
	}
}

// Name is for people: any name gives a valid default ClientID (a name
// with a space used to fail Run with an error about ClientID, a field the
// author never set), and the agent serves under it.
func TestAgentNameForPeople(t *testing.T) {
	tests := []struct{ name, prefix string }{
		{"My agent", "My-agent-"},
		{"  Grüße / Welt!  ", "Gr-e-Welt-"},
		{"a+b#c", "a-b-c-"},
		{"日本語", expertagent.DefaultAgentName + "-"},
		{"", expertagent.DefaultAgentName + "-"},
		{strings.Repeat("long name ", 40), "long-name-long-name-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := expertagent.NewAgent(expertagent.AgentOptions{Name: tc.name}).ClientID()
			if err := contract.ValidateLevel(id); err != nil || !strings.HasPrefix(id, tc.prefix) {
				t.Errorf("ClientID() = %q (%v), want a valid topic level starting %q", id, err, tc.prefix)
			}
		})
	}

	e := agStartBroker(t)
	online := make(chan contract.Presence, 4)
	if err := e.Broker.Bus().Subscribe(agContext(t), contract.PresenceFilter, func(_ string, p []byte) {
		var pr contract.Presence
		if json.Unmarshal(p, &pr) == nil && pr.Status == contract.StatusOnline {
			online <- pr
		}
	}); err != nil {
		t.Fatal(err)
	}
	r := e.startAgent(t, expertagent.AgentOptions{Name: "My agent"}, agEchoTool())
	if p := agRecv(t, online, "online presence"); p.Name != "My agent" || p.ClientID != r.ClientID() || !strings.HasPrefix(p.ClientID, "My-agent-") {
		t.Errorf("presence %+v, want name \"My agent\" and client ID %s", p, r.ClientID())
	}
}
