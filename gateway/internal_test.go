package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWithResultType(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{"resultType":"complete"}`},
		{`{ }`, `{"resultType":"complete"}`},
		{`{"content":[]}`, `{"resultType":"complete","content":[]}`},
		{`{"resultType":"input_required","requestState":"x"}`, `{"resultType":"input_required","requestState":"x"}`},
		{`[]`, `[]`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got := string(withResultType([]byte(tc.in)))
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("not JSON: %s", got)
			}
		})
	}
}

func TestAccepts(t *testing.T) {
	for _, tc := range []struct {
		h              string
		wantJSON, wSSE bool
	}{
		{"", true, true},
		{"application/json, text/event-stream", true, true},
		{"text/event-stream, application/json", true, true},
		{"application/json", true, false},
		{"text/event-stream", false, true},
		{"*/*", true, true},
		{"application/json;q=0.9, text/*;q=0.1", true, true},
		{"text/html", false, false},
	} {
		j, s := accepts(tc.h)
		if j != tc.wantJSON || s != tc.wSSE {
			t.Errorf("accepts(%q) = %v, %v; want %v, %v", tc.h, j, s, tc.wantJSON, tc.wSSE)
		}
	}
}

func TestValidID(t *testing.T) {
	for in, want := range map[string]bool{``: true, `1`: true, `-3`: true, `"a"`: true, `null`: false, `{}`: false, `[1]`: false, `true`: false} {
		if got := validID(json.RawMessage(in)); got != want {
			t.Errorf("validID(%s) = %v", in, got)
		}
	}
}

func TestSessions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ss := newSessions([]byte("secret"), time.Hour)
	ss.now = func() time.Time { return now }
	s, id := ss.create("alice", "tb_1", version20251125, nil)
	if strings.ContainsAny(id, " \t\r\n") {
		t.Fatalf("session id %q is not visible ASCII", id)
	}

	if got, err := ss.lookup(id, "alice", "tb_1"); err != nil || got != s {
		t.Fatalf("lookup: %v", err)
	}
	for name, tc := range map[string]struct{ id, user, tok string }{
		"other user":  {id, "bob", "tb_1"},
		"other token": {id, "alice", "tb_2"},
		"tampered":    {id[:len(id)-2] + "AA", "alice", "tb_1"},
		"no mac":      {strings.Split(id, ".")[0], "alice", "tb_1"},
		"garbage":     {"x.y", "alice", "tb_1"},
	} {
		if _, err := ss.lookup(tc.id, tc.user, tc.tok); !errors.Is(err, errSessionUnknown) {
			t.Errorf("%s: err = %v, want errSessionUnknown", name, err)
		}
	}

	// A replica sharing the secret serves the session from its claims.
	replica := newSessions([]byte("secret"), time.Hour)
	replica.now = ss.now
	if got, err := replica.lookup(id, "alice", "tb_1"); err != nil || got.key != s.key || got.version != version20251125 {
		t.Fatalf("replica lookup: %+v, %v", got, err)
	}
	if _, err := newSessions([]byte("other"), time.Hour).lookup(id, "alice", "tb_1"); !errors.Is(err, errSessionUnknown) {
		t.Fatalf("another secret accepted the id: %v", err)
	}

	now = now.Add(2 * time.Hour)
	if _, err := ss.lookup(id, "alice", "tb_1"); !errors.Is(err, errSessionUnknown) {
		t.Fatalf("idle past the TTL: err = %v", err)
	}

	s2, id2 := ss.create("alice", "tb_1", version20250618, nil)
	ss.end(s2)
	if _, err := ss.lookup(id2, "alice", "tb_1"); !errors.Is(err, errSessionEnded) {
		t.Fatalf("ended session: err = %v", err)
	}
	// Another token cannot tell an ended session from an unknown one.
	for _, who := range [][2]string{{"bob", "tb_2"}, {"alice", "tb_2"}} {
		if _, err := ss.lookup(id2, who[0], who[1]); !errors.Is(err, errSessionUnknown) {
			t.Fatalf("another token's ended session: err = %v, want errSessionUnknown", err)
		}
	}
	now = now.Add(2 * time.Hour)
	ss.sweep()
	if n := ss.count(); n != 0 {
		t.Fatalf("%d sessions left after the sweep", n)
	}
}

func TestBuildCatalog(t *testing.T) {
	pages := []json.RawMessage{
		json.RawMessage(`{"tools":[
			{"name":"echo","description":"Echo.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
			{"name":"platform_whoami","inputSchema":{"type":"object"}},
			{"name":"bad name!"},
			{"name":"noschema","description":"x","_meta":{"x":1}}
		],"nextCursor":"2"}`),
		json.RawMessage(`{"tools":[{"name":"echo"},{"name":"last","description":"L","inputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"a":{"type":"string"}}}}]}`),
	}
	taken := func(n string) bool { return n == "platform_whoami" }
	var warnings []string
	c, err := buildCatalog([]agentPages{{agent: "search", pages: pages}}, taken, func(msg string, _ ...any) { warnings = append(warnings, msg) })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range c.tools {
		names = append(names, tl.exposed)
	}
	if got := strings.Join(names, ","); got != "echo,last,noschema,search.platform_whoami" {
		t.Fatalf("tools = %s", got)
	}
	if len(warnings) != 2 { // "bad name!" and the second echo
		t.Fatalf("warnings = %v", warnings)
	}
	renamed, _ := c.lookup("search.platform_whoami")
	if renamed.name != "platform_whoami" || renamed.agent != "search" || !strings.Contains(string(renamed.raw), `"name":"search.platform_whoami"`) ||
		!strings.Contains(string(renamed.raw), `"description":`) {
		t.Fatalf("renamed tool: %+v %s", renamed, renamed.raw)
	}
	if e, _ := c.lookup("echo"); !e.readOnly || !strings.Contains(string(e.raw), `"_meta":{"io.toolbus/agent":"search"}`) {
		t.Fatalf("echo: %+v %s", e, e.raw)
	}
	if n, _ := c.lookup("noschema"); !strings.Contains(string(n.raw), `"inputSchema":{"type":"object"}`) ||
		!strings.Contains(string(n.raw), `"_meta":{"io.toolbus/agent":"search","x":1}`) {
		t.Fatalf("noschema: %s", n.raw)
	}
	if l, _ := c.lookup("last"); !strings.Contains(string(l.raw), `"$defs":{"a":{"type":"string"}}`) {
		t.Fatalf("JSON Schema keywords not kept: %s", l.raw)
	}
}

// The union of several agents: a name one agent holds alone keeps it; a
// name two agents hold is <agent>.<name> for both, and so is an agent's
// tool that a platform tool's name hides; the same answers in another
// order give the same names.
func TestBuildCatalogUnion(t *testing.T) {
	page := func(names ...string) []json.RawMessage {
		var b strings.Builder
		b.WriteString(`{"tools":[`)
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":"` + n + `"}`)
		}
		b.WriteString(`]}`)
		return []json.RawMessage{json.RawMessage(b.String())}
	}
	answers := []agentPages{
		{agent: "files", pages: page("read", "search", "platform_whoami")},
		{agent: "search", pages: page("search", "rank")},
		{agent: "web", pages: page("fetch", "search", "files.read")},
	}
	taken := func(n string) bool { return n == "platform_whoami" }
	var warnings []string
	c, err := buildCatalog(answers, taken, func(msg string, _ ...any) { warnings = append(warnings, msg) })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tl := range c.tools {
		got = append(got, tl.exposed+"@"+tl.agent+":"+tl.name)
	}
	want := "fetch@web:fetch,files.platform_whoami@files:platform_whoami,files.read@web:files.read,files.search@files:search," +
		"rank@search:rank,read@files:read,search.search@search:search,web.search@web:search"
	if strings.Join(got, ",") != want {
		t.Fatalf("union:\n got %s\nwant %s", strings.Join(got, ","), want)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	// web's own "files.read" is unique, so it keeps its name; had files'
	// read been qualified too, the second would be left out, not merged.
	clash := []agentPages{{agent: "files", pages: page("read", "x")}, {agent: "web", pages: page("files.read", "x")}}
	c, _ = buildCatalog(clash, taken, func(msg string, _ ...any) { warnings = append(warnings, msg) })
	if t2, ok := c.lookup("files.read"); !ok || t2.agent != "web" {
		t.Errorf("files.read: %+v", t2)
	}
	if _, ok := c.lookup("web.x"); !ok {
		t.Error("web.x missing")
	}
}
