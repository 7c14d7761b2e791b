package expertagent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
)

// shutdownLink is a scripted, open broker link that records how long each
// operation at shutdown may wait.
type shutdownLink struct {
	agentBenchLink
	mu    sync.Mutex
	waits map[string]time.Duration // operation -> its ctx's time left; -1: no deadline
}

func (l *shutdownLink) note(op string, ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	l.waits[op] = left
}

func (l *shutdownLink) isOpen() bool { return true }

func (l *shutdownLink) publish(ctx context.Context, topic string, _ []byte, _ bool) error {
	l.note("publish "+topic, ctx)
	return nil
}

func (l *shutdownLink) unsubscribe(ctx context.Context, _ ...string) error {
	l.note("unsubscribe", ctx)
	return nil
}

// TestShutdownOpsBounded: the offline presence and the unsubscribe at
// shutdown wait at most agentShutdownOpTimeout, not agentOpTimeout each: a
// broker stopped with the agent would otherwise hold its exit for 20 s.
func TestShutdownOpsBounded(t *testing.T) {
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", Username: "agent1", ClientID: "quitter"})
	link := &shutdownLink{waits: map[string]time.Duration{}}
	stop := agentBenchStart(t, a, link)
	stop()
	link.mu.Lock()
	defer link.mu.Unlock()
	for _, op := range []string{"publish " + contract.PresenceTopic("agent1", "quitter"), "unsubscribe"} {
		left, ok := link.waits[op]
		if !ok {
			t.Errorf("%s not tried at shutdown (waits %v)", op, link.waits)
			continue
		}
		if left < 0 || left > agentShutdownOpTimeout {
			t.Errorf("%s may wait %v, want a deadline within %v", op, left, agentShutdownOpTimeout)
		}
	}
}
