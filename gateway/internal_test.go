package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
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
	s, id := mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
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

	s2, id2 := mustCreate(t, ss, "alice", "tb_1", version20250618, nil)
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

// whoamiPlatform holds one platform tool, platform_whoami, whose name an
// agent's tool of that name cannot take.
type whoamiPlatform struct{}

func (whoamiPlatform) Tools() []platformtools.Tool {
	return []platformtools.Tool{{Tool: mcp.Tool{Name: "platform_whoami"}}}
}
func (whoamiPlatform) Lookup(string) (platformtools.Tool, bool) { return platformtools.Tool{}, false }
func (whoamiPlatform) Call(context.Context, *platformtools.Call) (json.RawMessage, error) {
	return nil, errors.New("not called")
}

// unionGateway is a gateway over agents answering tools/list with pages
// (agent -> pages), and the platform tool platform_whoami.
func unionGateway(t *testing.T, pages map[string][]string) (*Gateway, *logtest.Hook) {
	t.Helper()
	return fakeGateway(t, newFakeAgents(pages), func(o *Options) { o.Platform = whoamiPlatform{} })
}

// testCatalog is the agent catalog of testToken's own context, as
// AgentTools and tools/list build it (fetchCatalog: fetchAgentList and
// toolSets.union, with the gateway's configured limits).
func testCatalog(t *testing.T, g *Gateway, tok store.Token) *agentCatalog {
	t.Helper()
	key := contract.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID, SessionID: "tok-" + tok.ID,
		EntityType: contract.NoEntity, EntityID: contract.NoEntity}
	cat, err := g.catalogs.get(t.Context(), key, tok.Agents, g.opts.Agents.PresenceGeneration(), func(ctx context.Context, stale *agentCatalog) (*agentCatalog, error) {
		return g.fetchCatalog(ctx, key, tok, stale, g.log)
	})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// warnings are the messages of the warnings hook holds.
func warnings(hook *logtest.Hook) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			out = append(out, e.Message)
		}
	}
	return out
}

func TestCatalogFromAnswer(t *testing.T) {
	pages := []string{
		`{"tools":[
			{"name":"echo","description":"Echo.","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
			{"name":"platform_whoami","inputSchema":{"type":"object"}},
			{"name":"bad name!"},
			{"name":"noschema","description":"x","_meta":{"x":1}}
		]}`,
		`{"tools":[{"name":"echo"},{"name":"last","description":"L","inputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"a":{"type":"string"}}}}]}`,
	}
	g, hook := unionGateway(t, map[string][]string{"search": pages})
	c := testCatalog(t, g, testToken)
	var names []string
	for _, tl := range c.tools {
		names = append(names, tl.exposed)
	}
	if got := strings.Join(names, ","); got != "echo,last,noschema,search.platform_whoami" {
		t.Fatalf("tools = %s", got)
	}
	if w := warnings(hook); len(w) != 1 { // one line for "bad name!" and the second echo
		t.Fatalf("warnings = %v", w)
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
// name two agents hold keeps it for the one online longest (here, with no
// since known, the first by name) and is <agent>.<name> for the others,
// and so is an agent's tool that a platform tool's name hides, and every
// dotted name (it would read as another agent's).
func TestCatalogUnion(t *testing.T) {
	g, hook := unionGateway(t, map[string][]string{
		"files":  {toolsPage("read", "search", "platform_whoami")},
		"search": {toolsPage("search", "rank")},
		"web":    {toolsPage("fetch", "search", "files.read")},
	})
	c := testCatalog(t, g, testToken)
	var got []string
	for _, tl := range c.tools {
		got = append(got, tl.exposed+"@"+tl.agent+":"+tl.name)
	}
	want := "fetch@web:fetch,files.platform_whoami@files:platform_whoami," +
		"rank@search:rank,read@files:read,search@files:search,search.search@search:search,web.files.read@web:files.read,web.search@web:search"
	if strings.Join(got, ",") != want {
		t.Fatalf("union:\n got %s\nwant %s", strings.Join(got, ","), want)
	}
	if w := warnings(hook); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	// web's own "files.read" is web's, never files': had files' read been
	// qualified too, the name would still be files' alone.
	g, _ = unionGateway(t, map[string][]string{"files": {toolsPage("read", "x")}, "web": {toolsPage("files.read", "x")}})
	c = testCatalog(t, g, testToken)
	if t2, ok := c.lookup("files.x"); !ok || t2.agent != "files" {
		t.Errorf("files.x: %+v", t2)
	}
	if t2, ok := c.lookup("web.files.read"); !ok || t2.agent != "web" || t2.name != "files.read" {
		t.Errorf("web.files.read: %+v", t2)
	}
	// files.read reads as files' tool, and calls it (files lists it as
	// read): never web's.
	if t2, ok := c.lookup("files.read"); !ok || t2.agent != "files" || t2.name != "read" {
		t.Errorf("files.read: %+v", t2)
	}
}
