package gateway

import (
	"encoding/json"
	"testing"
)

// TestToolSetsShareEqualAnswers: the same answer is built once and shared;
// another answer, even one page of it, is built apart.
func TestToolSetsShareEqualAnswers(t *testing.T) {
	ts := newToolSets()
	builds := 0
	build := func(pages []json.RawMessage) *toolSet {
		t.Helper()
		set, err := ts.get(pages, func() (*toolSet, error) {
			builds++
			return buildCatalog([]agentPages{{agent: "a", pages: pages}}, func(string) bool { return false }, func(string, ...any) {})
		})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	a := []json.RawMessage{json.RawMessage(`{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`)}
	a2 := []json.RawMessage{json.RawMessage(`{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`)} // equal bytes, another slice
	b := []json.RawMessage{json.RawMessage(`{"tools":[{"name":"echo2","inputSchema":{"type":"object"}}]}`)}
	two := []json.RawMessage{a[0], b[0]}

	s1, s2 := build(a), build(a2)
	if s1 != s2 || builds != 1 {
		t.Fatalf("equal answers: shared %v, %d builds; want one set, 1 build", s1 == s2, builds)
	}
	if s3 := build(b); s3 == s1 || builds != 2 {
		t.Fatalf("another answer: shared with the first %v, %d builds", s3 == s1, builds)
	}
	if s4 := build(two); s4 == s1 || builds != 3 || len(s4.tools) != 2 {
		t.Fatalf("two pages: %d tools, %d builds", len(s4.tools), builds)
	}
	if _, ok := s1.lookup("echo"); !ok {
		t.Fatal("shared set lost its tool")
	}
}

func TestToolSetsLastListed(t *testing.T) {
	ts := newToolSets()
	if _, ok := ts.lastListed("echo"); ok {
		t.Fatal("a tool listed before any list")
	}
	for _, page := range []string{`{"tools":[{"name":"echo"}]}`, `{"tools":[{"name":"sha256"}]}`} {
		pages := []json.RawMessage{json.RawMessage(page)}
		if _, err := ts.get(pages, func() (*toolSet, error) {
			return buildCatalog([]agentPages{{agent: "a", pages: pages}}, func(string) bool { return false }, func(string, ...any) {})
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := ts.lastListed("echo"); ok {
		t.Error("echo found: only the latest list counts")
	}
	if tool, ok := ts.lastListed("sha256"); !ok || tool.name != "sha256" {
		t.Errorf("sha256: %+v %v", tool, ok)
	}
}
