package expertagent

import (
	"errors"
	"strconv"
	"testing"

	"github.com/toolbus/toolbus/jsonrpc"
)

func TestPendingTableKinds(t *testing.T) {
	tab := newPendingTable()
	a, b := newPendingCall("a", "ta"), newPendingCall("b", "tb")
	tab.add(a)
	tab.add(b)
	if p, k := tab.lookup("a"); p != a || k != replyPending {
		t.Fatalf("lookup a: %v %v", p, k)
	}
	tab.remove("a", true)  // answered
	tab.remove("b", false) // abandoned
	for _, tc := range []struct {
		id   string
		want replyKind
	}{{"a", replyDuplicate}, {"b", replyLate}, {"never", replyLate}} {
		if _, k := tab.lookup(tc.id); k != tc.want {
			t.Errorf("lookup %s: %v, want %v", tc.id, k, tc.want)
		}
	}
	if tab.remove("a", true) {
		t.Error("second remove reported an open call")
	}
	// The memory of finished calls is bounded.
	for i := range recentCalls {
		id := "x" + strconv.Itoa(i)
		tab.add(newPendingCall(id, "t"))
		tab.remove(id, true)
	}
	if _, k := tab.lookup("a"); k != replyLate {
		t.Errorf("a still remembered after %d more calls", recentCalls)
	}
	if len(tab.recentDone) != recentCalls || tab.len() != 0 {
		t.Errorf("recent %d, open %d", len(tab.recentDone), tab.len())
	}
}

func TestPendingCallOrderAndBounds(t *testing.T) {
	p := newPendingCall("c", "t")
	for i := range maxInterimQueued {
		if !p.addInterim(&jsonrpc.Message{Method: "m" + strconv.Itoa(i)}) {
			t.Fatalf("interim %d refused", i)
		}
	}
	if p.addInterim(&jsonrpc.Message{Method: "over"}) {
		t.Fatal("interim over the bound accepted")
	}
	final := &jsonrpc.Message{Result: []byte(`{}`)}
	if !p.finish(final, nil) || p.finish(&jsonrpc.Message{}, nil) || p.finish(nil, errors.New("late")) {
		t.Fatal("finish must succeed once")
	}
	if p.addInterim(&jsonrpc.Message{Method: "after"}) {
		t.Fatal("interim after the final accepted")
	}
	<-p.notify
	ims, f, err := p.take()
	if len(ims) != maxInterimQueued || f != final || err != nil {
		t.Fatalf("take: %d interim, final %v, err %v", len(ims), f, err)
	}
	for i, m := range ims {
		if m.Method != "m"+strconv.Itoa(i) {
			t.Fatalf("interim %d is %s: out of order", i, m.Method)
		}
	}
}

func TestPendingFailAll(t *testing.T) {
	tab := newPendingTable()
	a, b := newPendingCall("a", "t"), newPendingCall("b", "t")
	tab.add(a)
	tab.add(b)
	b.finish(&jsonrpc.Message{Result: []byte(`1`)}, nil)
	boom := errors.New("boom")
	if n := tab.failAll(boom); n != 1 {
		t.Fatalf("failed %d calls, want 1 (b was answered)", n)
	}
	if _, _, err := a.take(); !errors.Is(err, boom) {
		t.Fatalf("a: %v", err)
	}
	if _, f, err := b.take(); f == nil || err != nil {
		t.Fatalf("b: %v %v", f, err)
	}
}

func TestRawIDIs(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{`"c-1"`, true}, {` "c-1" `, true}, {`"c\u002d1"`, true},
		{`"c-2"`, false}, {`1`, false}, {`null`, false}, {``, false}, {`"c-1`, false},
	} {
		if got := rawIDIs([]byte(tc.raw), "c-1"); got != tc.want {
			t.Errorf("rawIDIs(%s) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestPahoMatch(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b/c", "a/b/c", true},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"+", "a/b", false},
		{"a/+", "a/", true},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
		{"+/+/#", "a/b", true},
		{PresenceFilter, PresenceTopic("x"), true},
		{PresenceFilter, TopicPrefix + "agents/x/y/status", false},
		{RequestFilter, "ff/v1/mcp/p/u/s/t/i/req", true},
		{RequestFilter, "ff/v1/mcp/p/u/s/t/i/res", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
	} {
		if got := pahoMatch(tc.filter, tc.topic); got != tc.want {
			t.Errorf("pahoMatch(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
	if got := pahoPattern("$share/g/" + RequestFilter); got != RequestFilter {
		t.Errorf("pahoPattern = %q", got)
	}
}
