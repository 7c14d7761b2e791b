package requester

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
)

// decimalSeq is the seqOf of the tables of these tests: IDs are decimal
// sequence numbers.
func decimalSeq(id string) (uint64, bool) {
	n, err := strconv.ParseUint(id, 10, 64)
	return n, err == nil && n > 0
}

func pendingCallNo(seq uint64, agent string) *pendingCall {
	return newPendingCall(strconv.FormatUint(seq, 10), seq, agent, "p/u/s/_/_/res")
}

func TestPendingTableKinds(t *testing.T) {
	tab := newPendingTable(decimalSeq)
	a, b := pendingCallNo(1, "ta"), pendingCallNo(2, "tb")
	tab.add(a)
	tab.add(b)
	if p, k := tab.lookup("1"); p != a || k != replyPending {
		t.Fatalf("lookup 1: %v %v", p, k)
	}
	tab.remove(a, true)  // answered
	tab.remove(b, false) // abandoned
	for _, tc := range []struct {
		id   string
		want replyKind
	}{{"1", replyDuplicate}, {"2", replyLate}, {"3", replyLate}, {"never", replyLate}} {
		if _, k := tab.lookup(tc.id); k != tc.want {
			t.Errorf("lookup %s: %v, want %v", tc.id, k, tc.want)
		}
	}
	if tab.remove(a, true) {
		t.Error("second remove reported an open call")
	}

	// The memory of finished calls is bounded: recentCalls calls later, 1
	// is forgotten.
	long := pendingCallNo(3, "t") // outlives all of them
	tab.add(long)
	last := uint64(3)
	for range recentCalls {
		last++
		p := pendingCallNo(last, "t")
		tab.add(p)
		tab.remove(p, true)
	}
	if _, k := tab.lookup("1"); k != replyLate {
		t.Errorf("1 still remembered after %d more calls", recentCalls)
	}
	if _, k := tab.lookup(strconv.FormatUint(last, 10)); k != replyDuplicate {
		t.Errorf("the last call is not remembered")
	}
	// The long call ends after a newer one took its place: the newer one
	// stays remembered.
	tab.remove(long, false)
	if _, k := tab.lookup(strconv.FormatUint(3+recentCalls, 10)); k != replyDuplicate {
		t.Errorf("a call that ended earlier was forgotten for an older one")
	}
	if tab.len() != 0 {
		t.Errorf("open %d", tab.len())
	}
}

func TestPendingCallOrderAndBounds(t *testing.T) {
	p := pendingCallNo(1, "t")
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
	tab := newPendingTable(decimalSeq)
	a, b := pendingCallNo(1, "t"), pendingCallNo(2, "t")
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
		{contract.PresenceFilter, contract.PresenceTopic("a", "x"), true},
		{contract.PresenceFilter, contract.TopicPrefix + "a/x/y/status", false},
		{contract.RequestFilter("a", "_"), "ff/v2/mcp/a/_/p/u/s/t/i/req", true},
		{contract.RequestFilter("a", "_"), "ff/v2/mcp/a/_/p/u/s/t/i/res", false},
		{contract.RequestFilter("a", "_"), "ff/v2/mcp/b/_/p/u/s/t/i/req", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
	} {
		if got := pahoMatch(tc.filter, tc.topic); got != tc.want {
			t.Errorf("pahoMatch(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
	if got := pahoPattern(contract.SharedRequestFilter("a")); got != contract.RequestFilter("a", "_") {
		t.Errorf("pahoPattern = %q", got)
	}
}

// Correlation IDs are random per call: two calls' IDs share the
// requester's prefix and differ after it in more than their numbers.
func TestRequesterIDsAreRandomPerCall(t *testing.T) {
	r := New(nil, Options{})
	seen := map[string]bool{}
	for range 1000 {
		id, seq := r.nextID()
		nonce := id[len(r.idPrefix)+len(strconv.FormatUint(seq, 36))+1:]
		if len(nonce) != 16 || seen[nonce] {
			t.Fatalf("ID %q: random part %q is not 16 fresh hex digits", id, nonce)
		}
		seen[nonce] = true
	}
}

func TestRequesterSeqOf(t *testing.T) {
	r := New(nil, Options{})
	for range 400 { // up to a number spelt with a letter
		r.nextID()
	}
	id, seq := r.nextID()
	if got, ok := r.seqOf(id); !ok || got != seq {
		t.Fatalf("seqOf(%q) = %d %t, want %d", id, got, ok, seq)
	}
	digits := strconv.FormatUint(seq, 36)
	nonce := id[len(id)-16:]
	// An upper-case nonce: with at least one letter in it (a random one
	// may be all digits, and then the same as the valid one).
	upperNonce := strings.ToUpper(nonce[:15]) + "A"
	for _, bad := range []string{
		"", "x" + id, r.idPrefix, r.idPrefix + "0" + digits + "-" + nonce, r.idPrefix + strings.ToUpper(digits) + "-" + nonce,
		r.idPrefix + digits, r.idPrefix + digits + "-", r.idPrefix + digits + "-" + nonce[1:], r.idPrefix + digits + "-" + upperNonce,
		r.idPrefix + digits + "-" + nonce + "0", r.idPrefix + "3w5e11264sgsg-" + nonce, r.idPrefix + "zzzzzzzzzzzzzz-" + nonce,
	} {
		if _, ok := r.seqOf(bad); ok {
			t.Errorf("seqOf(%q) accepted", bad)
		}
	}
}

// TestPendingFailAgentAndClaimed: the last instance of an agent going
// fails the calls to that agent only; one instance going fails only the
// calls it claimed, told apart by agent and client ID.
func TestPendingFailAgentAndClaimed(t *testing.T) {
	tab := newPendingTable(decimalSeq)
	echo1, echo2, echoFree, search1 := pendingCallNo(1, "echo"), pendingCallNo(2, "echo"), pendingCallNo(3, "echo"), pendingCallNo(4, "search")
	for _, p := range []*pendingCall{echo1, echo2, echoFree, search1} {
		tab.add(p)
	}
	echo1.claim("i1")
	if echo1.claim("i2") || echo1.claimedBy() != "i1" {
		t.Fatalf("a second claim replaced the first: %q", echo1.claimedBy())
	}
	echo2.claim("i2")
	search1.claim("i1") // the same client ID under another agent

	gone := errors.New("gone")
	if n := tab.failClaimed(instanceKey("echo", "i1"), gone); n != 1 {
		t.Fatalf("failClaimed(echo/i1) failed %d calls, want 1", n)
	}
	if _, _, err := echo1.take(); !errors.Is(err, gone) {
		t.Fatalf("echo1: %v", err)
	}
	for _, p := range []*pendingCall{echo2, echoFree, search1} {
		if _, _, err := p.take(); err != nil {
			t.Fatalf("call %s failed: %v", p.id, err)
		}
	}

	noAgent := errors.New("no agent")
	if n := tab.failAgent("echo", noAgent); n != 2 {
		t.Fatalf("failAgent(echo) failed %d calls, want 2 (echo1 had failed already)", n)
	}
	for _, p := range []*pendingCall{echo2, echoFree} {
		if _, _, err := p.take(); !errors.Is(err, noAgent) {
			t.Fatalf("call %s: %v", p.id, err)
		}
	}
	if _, _, err := search1.take(); err != nil {
		t.Fatalf("the other agent's call failed: %v", err)
	}
}

// TestPendingFailUnheard: when an instance reconnects, the calls sent to
// it that it has said nothing of fail; those it spoke of, those of another
// instance and those no instance holds yet stay open.
func TestPendingFailUnheard(t *testing.T) {
	tab := newPendingTable(decimalSeq)
	unheard, heard, other, free := pendingCallNo(1, "echo"), pendingCallNo(2, "echo"), pendingCallNo(3, "echo"), pendingCallNo(4, "echo")
	for _, p := range []*pendingCall{unheard, heard, other, free} {
		tab.add(p)
	}
	unheard.claim("i1") // addressed to i1, as AddressInstances does
	heard.claim("i1")
	if heard.hear("i1") {
		t.Fatal("hear claimed a call addressed to that instance already")
	}
	other.claim("i2")
	if other.hear("i1") || other.claimedBy() != "i2" {
		t.Fatalf("another instance's message took the call: %q", other.claimedBy())
	}
	lost := errors.New("lost")
	if n := tab.failUnheard(instanceKey("echo", "i1"), false, nil, lost); n != 1 {
		t.Fatalf("failUnheard(echo/i1) failed %d calls, want 1", n)
	}
	if _, _, err := unheard.take(); !errors.Is(err, lost) {
		t.Fatalf("the unheard call: %v", err)
	}
	for _, p := range []*pendingCall{heard, other, free} {
		if _, _, err := p.take(); err != nil {
			t.Fatalf("call %s failed: %v", p.id, err)
		}
	}
	// The pool's only instance reconnects: the unclaimed pool call fails
	// too (another agent's does not).
	search := pendingCallNo(5, "search")
	tab.add(search)
	if n := tab.failUnheard(instanceKey("echo", "i1"), true, nil, lost); n != 1 {
		t.Fatalf("failUnheard(echo/i1, pool) failed %d calls, want 1", n)
	}
	if _, _, err := free.take(); !errors.Is(err, lost) {
		t.Fatalf("the pool call: %v", err)
	}
	if _, _, err := search.take(); err != nil {
		t.Fatalf("another agent's call failed: %v", err)
	}

	// After the grace: of the calls unheard at the reconnect, those heard
	// of since stay, and a call made since is not among them.
	early, heardLate := pendingCallNo(6, "echo"), pendingCallNo(7, "echo")
	for _, p := range []*pendingCall{early, heardLate} {
		p.claim("i3")
		tab.add(p)
	}
	among := tab.unheard(instanceKey("echo", "i3"), false)
	late := pendingCallNo(8, "echo")
	late.claim("i3")
	tab.add(late)
	heardLate.hear("i3")
	if n := tab.failUnheard(instanceKey("echo", "i3"), false, among, lost); n != 1 {
		t.Fatalf("failUnheard after the grace failed %d calls, want 1 (the early unheard one)", n)
	}
	if _, _, err := early.take(); !errors.Is(err, lost) {
		t.Fatalf("the early call: %v", err)
	}
	for _, p := range []*pendingCall{heardLate, late} {
		if _, _, err := p.take(); err != nil {
			t.Fatalf("call %s failed: %v", p.id, err)
		}
	}
}

func TestReplyKeyOf(t *testing.T) {
	for _, tc := range []struct {
		topic                string
		agent, instance, key string
		ok                   bool
	}{
		{"ff/v2/mcp/echo/i1/p/u/s/_/_/res", "echo", "i1", "p/u/s/_/_/res", true},
		{"ff/v2/mcp/echo/_/p/u/s/_/_/res", "echo", "_", "p/u/s/_/_/res", true},
		{"ff/v2/mcp/echo/i1/p/u/s/_/_/req", "", "", "", false},
		{"ff/v2/mcp/echo/i1/status", "", "", "", false},
		{"ff/v2/mcp/echo/res", "", "", "", false},
		{"ff/v1/mcp/p/u/s/_/_/res", "", "", "", false},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			agent, instance, key, ok := contract.SplitReply(tc.topic)
			if agent != tc.agent || instance != tc.instance || key != tc.key || ok != tc.ok {
				t.Errorf("SplitReply = %q %q %q %v, want %q %q %q %v", agent, instance, key, ok, tc.agent, tc.instance, tc.key, tc.ok)
			}
		})
	}
	// The key of a reply is the key of its context's reply filter, as the
	// pending call holds it.
	c := contract.Context{PlatformID: "p", UserID: "u", SessionID: "s", EntityType: "_", EntityID: "_"}
	if _, _, key, _ := contract.SplitReply(c.ReplyTopic("echo", "i1")); key != c.Levels()+"/"+contract.Reply {
		t.Errorf("key %q", key)
	}
}

func TestPahoReplyKey(t *testing.T) {
	c := contract.Context{PlatformID: "p", UserID: "u", SessionID: "s", EntityType: "_", EntityID: "_"}
	for _, tc := range []struct {
		filter, key string
		ok          bool
	}{
		{c.ReplyFilter(), c.Levels() + "/" + contract.Reply, true},
		{c.ReplyTopic("echo", "i1"), "", false},
		{"ff/v2/mcp/+/+/p/u/+/_/_/res", "", false},
		{"ff/v2/mcp/+/+/p/u/s/_/_/req", "", false},
		{"ff/v2/mcp/+/+/p/u/s/#", "", false},
		{contract.PresenceFilter, "", false},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			if key, ok := contract.ReplyFilterKey(tc.filter); key != tc.key || ok != tc.ok {
				t.Errorf("ReplyFilterKey = %q %v, want %q %v", key, ok, tc.key, tc.ok)
			}
		})
	}
	// Every reply of the context, whoever sends it, is routed under its
	// filter's key.
	want, _ := contract.ReplyFilterKey(c.ReplyFilter())
	for _, from := range [][2]string{{"echo", "i1"}, {"search", "s9"}} {
		if _, _, key, _ := contract.SplitReply(c.ReplyTopic(from[0], from[1])); key != want {
			t.Errorf("the key %q of %s's reply is not its filter's %q", key, from, want)
		}
	}
}
