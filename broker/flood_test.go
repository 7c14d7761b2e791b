package broker_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// maxEventField is what an Event's client-chosen string may take: the
// broker's bound and the note of what it left out.
const maxEventField = 300

// loggedBytes is how many bytes hook's lines take, formatted.
func loggedBytes(t *testing.T, hook *test.Hook) (n int, longest string) {
	t.Helper()
	for _, e := range hook.AllEntries() {
		s, err := e.String()
		if err != nil {
			t.Fatal(err)
		}
		n += len(s)
		if len(s) > len(longest) {
			longest = s
		}
	}
	return n, longest
}

// Refused logins with 64 KiB user names and client IDs, and refused QoS 0
// publishes with 20 KB topics, write a bounded log: every such string is
// cut, and the lines of one source or one client after the first are
// counted and summed up (once a window, and at Close). Events carry the
// strings cut too.
func TestRefusalFloodLogBounded(t *testing.T) {
	const floods = 200
	logger, hook := test.NewNullLogger()
	logger.SetLevel(logrus.InfoLevel)
	var mu sync.Mutex
	var logins, denied atomic.Int64
	var longestEvent int
	e := newEnv(t, func(o *broker.Options) {
		o.Logger = logrus.NewEntry(logger)
		o.MaxFailedLogins = 1 << 20 // the throttle is not what is tested here
		o.Events = func(ev broker.Event) {
			mu.Lock()
			longestEvent = max(longestEvent, len(ev.ClientID), len(ev.Username), len(ev.Topic), len(ev.Remote))
			if ev.Err != nil {
				longestEvent = max(longestEvent, len(ev.Err.Error()))
			}
			mu.Unlock()
			switch ev.Kind {
			case broker.EventLoginRefused:
				logins.Add(1)
			case broker.EventDenied:
				denied.Add(1)
			}
		}
	})
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	big := strings.Repeat("x", 64<<10)

	t.Run("refused logins", func(t *testing.T) {
		for i := range floods {
			c := dialRaw(t, e.Broker.Addr().String())
			id := big[:len(big)-i] // a new client ID each time
			if ack := c.connect(id, "u"+big, "wrong-password", 30); ack.ReasonCode == 0 {
				t.Fatal("logged in")
			}
			_ = c.conn.Close()
		}
		eventually(t, "every refusal reported", func() bool { return logins.Load() == floods })
	})

	t.Run("refused publishes", func(t *testing.T) {
		agent := dialRaw(t, e.Broker.Addr().String())
		if ack := agent.connect("agent1-a", "agent1", pwa, 30); ack.ReasonCode != 0 {
			t.Fatalf("CONNACK %#x", ack.ReasonCode)
		}
		topic := "nowhere/" + strings.Repeat("t", 20<<10)
		for range floods {
			agent.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: topic, Payload: []byte("x")})
		}
		eventually(t, "every refused publish reported", func() bool { return denied.Load() == floods })
	})

	if err := e.Broker.Close(); err != nil { // writes the summaries
		t.Fatal(err)
	}
	n, longest := loggedBytes(t, hook)
	// Unbounded, these floods wrote some 40 MB; bounded, a few lines of
	// a few hundred bytes each (the first of each kind, the summaries,
	// the broker's own start and stop).
	if n > 32<<10 || len(longest) > 2<<10 {
		t.Errorf("the floods wrote %d bytes of log in %d lines, the longest %d bytes: %.300s…", n, len(hook.AllEntries()), len(longest), longest)
	}
	mu.Lock()
	defer mu.Unlock()
	if longestEvent > maxEventField {
		t.Errorf("an Event carried a client-chosen string of %d bytes", longestEvent)
	}
	var summaries []string
	for _, en := range hook.AllEntries() {
		if _, ok := en.Data["repeated"]; ok {
			summaries = append(summaries, en.Message)
		}
	}
	want := []string{"login refused ×199 in the last 10s", "acl: denied ×199 in the last 10s"}
	for _, w := range want {
		found := false
		for _, s := range summaries {
			found = found || s == w
		}
		if !found {
			t.Errorf("summary %q not written; summaries: %q", w, summaries)
		}
	}
}
