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

func pendingCallNo(seq uint64, topic string) *pendingCall {
	return newPendingCall(strconv.FormatUint(seq, 10), seq, topic)
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
		{contract.PresenceFilter, contract.PresenceTopic("x"), true},
		{contract.PresenceFilter, contract.TopicPrefix + "agents/x/y/status", false},
		{contract.RequestFilter, "ff/v1/mcp/p/u/s/t/i/req", true},
		{contract.RequestFilter, "ff/v1/mcp/p/u/s/t/i/res", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
	} {
		if got := pahoMatch(tc.filter, tc.topic); got != tc.want {
			t.Errorf("pahoMatch(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
	if got := pahoPattern("$share/g/" + contract.RequestFilter); got != contract.RequestFilter {
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
	for _, bad := range []string{
		"", "x" + id, r.idPrefix, r.idPrefix + "0" + digits + "-" + nonce, r.idPrefix + strings.ToUpper(digits) + "-" + nonce,
		r.idPrefix + digits, r.idPrefix + digits + "-", r.idPrefix + digits + "-" + nonce[1:], r.idPrefix + digits + "-" + strings.ToUpper(nonce),
		r.idPrefix + digits + "-" + nonce + "0", r.idPrefix + "3w5e11264sgsg-" + nonce, r.idPrefix + "zzzzzzzzzzzzzz-" + nonce,
	} {
		if _, ok := r.seqOf(bad); ok {
			t.Errorf("seqOf(%q) accepted", bad)
		}
	}
}
