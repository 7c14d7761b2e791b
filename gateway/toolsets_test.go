package gateway

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"weak"

	"github.com/toolbus/toolbus/store"
)

// tokenOf is a token of alice's other than testToken: another context.
func tokenOf(id string) store.Token {
	return store.Token{ID: id, UserID: "alice", Scopes: store.DefaultScopes}
}

// TestToolSetsShareEqualAnswers: contexts whose agent gave the same answer
// share one decoded list and one union; another answer, even one more
// page of it, is built apart; the same pages from another agent are that
// agent's own.
func TestToolSetsShareEqualAnswers(t *testing.T) {
	agents := newFakeAgents(map[string][]string{"a": {toolsPage("echo")}})
	g, _ := fakeGateway(t, agents, nil)
	c1, c2 := testCatalog(t, g, tokenOf("tb_1")), testCatalog(t, g, tokenOf("tb_2"))
	if c1 == c2 || c1.toolSet != c2.toolSet || c1.answers[0].list != c2.answers[0].list {
		t.Fatalf("equal answers in two contexts: shared set %v, shared list %v; want both shared",
			c1.toolSet == c2.toolSet, c1.answers[0].list == c2.answers[0].list)
	}
	set := func(pages ...string) *toolSet {
		t.Helper()
		agents.mu.Lock()
		agents.pages["a"] = pages
		agents.mu.Unlock()
		agents.changed("a")
		return testCatalog(t, g, tokenOf("tb_1")).toolSet
	}
	if s3 := set(toolsPage("echo2")); s3 == c1.toolSet {
		t.Fatal("another answer shares the first's set")
	}
	if s4 := set(toolsPage("echo"), toolsPage("echo2")); s4 == c1.toolSet || len(s4.tools) != 2 {
		t.Fatalf("two pages: %d tools, shared with the first %v", len(s4.tools), s4 == c1.toolSet)
	}
	if s5 := set(toolsPage("echo")); s5 != c1.toolSet {
		t.Fatal("the first answer again: not shared")
	}
	if _, ok := c1.lookup("echo"); !ok {
		t.Fatal("shared set lost its tool")
	}
	// Another agent giving the very same bytes gets a list of its own.
	other := newFakeAgents(map[string][]string{"b": {toolsPage("echo")}})
	ts := g.toolSets
	g2, _ := fakeGateway(t, other, nil)
	g2.toolSets = ts
	if tl, ok := testCatalog(t, g2, tokenOf("tb_3")).lookup("echo"); !ok || tl.agent != "b" {
		t.Fatalf("b's echo: %+v", tl)
	}
}

// TestToolSetsKeepNoPages: a shared answer is recognised without keeping
// its bytes. The issue: every page (up to MaxAgentListBytes) was kept
// beside the decoded list, only to be compared.
func TestToolSetsKeepNoPages(t *testing.T) {
	ts := newToolSets()
	lim := listLimits{tools: DefaultMaxAgentTools, bytes: DefaultMaxAgentListBytes, toolBytes: DefaultMaxToolBytes}
	// A large answer of which little is kept: the tool is over toolBytes.
	page := []byte(`{"tools":[{"name":"big","description":"` + strings.Repeat("x", 1<<20) + `"},{"name":"small"}]}`)
	gone := weak.Make(&page[0])
	a := agentPages{agent: "a", pages: []json.RawMessage{page}}
	first, fresh, err := ts.agentList(a, lim.bytes, func() (*agentList, error) { return decodeAgentList(a, lim) })
	if err != nil || !fresh {
		t.Fatal(fresh, err)
	}
	again := agentPages{agent: "a", pages: []json.RawMessage{[]byte(string(page))}}
	page, a = nil, agentPages{}
	l, fresh, err := ts.agentList(again, lim.bytes, func() (*agentList, error) { return decodeAgentList(again, lim) })
	if err != nil || fresh || l != first {
		t.Fatalf("the same answer again: decoded anew %v, shared %v (%v)", fresh, l == first, err)
	}
	runtime.GC()
	if gone.Value() != nil {
		t.Error("the answer's page is still reachable after it was shared")
	}
	runtime.KeepAlive(ts)
}

func TestToolSetsLastListed(t *testing.T) {
	agents := newFakeAgents(map[string][]string{"a": {toolsPage("echo")}})
	g, _ := fakeGateway(t, agents, nil)
	if _, ok := g.toolSets.lastListed("echo"); ok {
		t.Fatal("a tool listed before any list")
	}
	testCatalog(t, g, tokenOf("tb_1"))
	agents.mu.Lock()
	agents.pages["a"] = []string{toolsPage("sha256")}
	agents.mu.Unlock()
	agents.changed("a")
	testCatalog(t, g, tokenOf("tb_2"))
	if _, ok := g.toolSets.lastListed("echo"); ok {
		t.Error("echo found: only the latest list counts")
	}
	if tool, ok := g.toolSets.lastListed("sha256"); !ok || tool.name != "sha256" {
		t.Errorf("sha256: %+v %v", tool, ok)
	}
}
