package acl

import (
	"strings"
	"sync"
	"testing"
)

var (
	platformID = Identity{Username: "gw1", Role: RolePlatform}
	agentID    = Identity{Username: "agent1", Role: RoleExpertAgent}
	clientID1  = Identity{Username: "c1", Role: RoleClient}
	clientID2  = Identity{Username: "c2", Role: RoleClient}
)

func disabled(id Identity) Identity { id.Disabled = true; return id }

// testRules are operator rules, three valid and some that a hand-edited
// store could hold and that the Policy must ignore.
func testRules() []Rule {
	return []Rule{
		{ID: 1, Username: "", Access: AccessRead, Filter: "public/#"},
		{ID: 2, Username: "c1", Access: AccessWrite, Filter: "sensors/+/temp"},
		{ID: 3, Username: "c1", Access: AccessReadWrite, Filter: "devices/c1/#"},
		// Invalid: must never take effect.
		{ID: 4, Username: "", Access: AccessReadWrite, Filter: "#"},
		{ID: 5, Username: "", Access: AccessReadWrite, Filter: "ff/v1/mcp/#"},
		{ID: 6, Username: "c1", Access: AccessReadWrite, Filter: "$SYS/#"},
		{ID: 7, Username: "c1", Access: Access(8), Filter: "other/#"},
		{ID: 8, Username: "bad/user", Access: AccessReadWrite, Filter: "x/#"},
	}
}

const (
	req   = "ff/v1/mcp/p1/u1/s1/e1/i1/req"
	res   = "ff/v1/mcp/p1/u1/s1/e1/i1/res"
	plain = "ff/v1/mcp/p1/u1/s1/_/_/req"
)

func TestPolicyAllow(t *testing.T) {
	long := strings.Repeat("a", MaxLevelLen+1)
	type tc struct {
		name     string
		id       Identity
		clientID string
		action   Action
		topic    string
		want     bool
	}
	pub, sub := Publish, Subscribe
	cases := []tc{
		// Platform, allowed.
		{"platform publishes a request", platformID, "gw1-x", pub, req, true},
		{"platform publishes a request without entity", platformID, "gw1-x", pub, plain, true},
		{"platform subscribes to an exact response topic", platformID, "gw1-x", sub, res, true},
		{"platform subscribes to all presence", platformID, "gw1-x", sub, "ff/v1/mcp/agents/+/status", true},
		{"platform subscribes to one agent's presence", platformID, "gw1-x", sub, "ff/v1/mcp/agents/agent1-a/status", true},
		{"platform may use platformId agents", platformID, "gw1-x", pub, "ff/v1/mcp/agents/u/s/e/i/req", true},
		{"platform publishes to its own probe topic", platformID, "gw1-x", pub, "ff/v1/mcp/probe/gw1/gw1-x-a", true},
		{"platform subscribes to its own probe topic", platformID, "gw1-x", sub, "ff/v1/mcp/probe/gw1/gw1-x-b", true},
		{"client publishes to its own probe topic", clientID1, "c1", pub, "ff/v1/mcp/probe/c1/x", true},
		{"agent subscribes to its own probe topic", agentID, "a", sub, "ff/v1/mcp/probe/agent1/x", true},
		// Platform, denied.
		{"platform publishes to another's probe topic", platformID, "gw1-x", pub, "ff/v1/mcp/probe/gw2/x", false},
		{"platform subscribes to another's probe topic", platformID, "gw1-x", sub, "ff/v1/mcp/probe/agent1/x", false},
		{"platform probes with a wildcard", platformID, "gw1-x", sub, "ff/v1/mcp/probe/gw1/+", false},
		{"platform probes with #", platformID, "gw1-x", sub, "ff/v1/mcp/probe/gw1/#", false},
		{"platform probes below the probe level", platformID, "gw1-x", pub, "ff/v1/mcp/probe/gw1/a/b", false},
		{"platform probes on its username alone", platformID, "gw1-x", pub, "ff/v1/mcp/probe/gw1", false},
		{"platform probes on an empty level", platformID, "gw1-x", pub, "ff/v1/mcp/probe/gw1/", false},
		{"client reads requests through a probe-shaped context", clientID1, "c1", sub, "ff/v1/mcp/probe/c1/s/e/i/req", false},
		{"client injects a request through a probe-shaped context", clientID1, "c1", pub, "ff/v1/mcp/probe/c1/s/e/i/req", false},
		{"disabled platform probes", disabled(platformID), "gw1-x", pub, "ff/v1/mcp/probe/gw1/x", false},
		{"platform spoofs a response", platformID, "gw1-x", pub, res, false},
		{"platform publishes with a wildcard", platformID, "gw1-x", pub, "ff/v1/mcp/+/u1/s1/e1/i1/req", false},
		{"platform publishes with #", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/s1/e1/#", false},
		{"platform publishes too few levels", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/s1/e1/req", false},
		{"platform publishes too many levels", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/s1/e1/i1/x/req", false},
		{"platform publishes below req", platformID, "gw1-x", pub, req + "/x", false},
		{"platform publishes trailing slash", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/s1/e1/i1/", false},
		{"platform publishes empty level", platformID, "gw1-x", pub, "ff/v1/mcp/p1//s1/e1/i1/req", false},
		{"platform publishes level with $", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/$s/e1/i1/req", false},
		{"platform publishes level with dot", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/s1/e1/a.b/req", false},
		{"platform publishes level with space", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u 1/s1/e1/i1/req", false},
		{"platform publishes level with NUL", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u\x001/s1/e1/i1/req", false},
		{"platform publishes level too long", platformID, "gw1-x", pub, "ff/v1/mcp/p1/u1/s1/e1/" + long + "/req", false},
		{"platform publishes the tree root", platformID, "gw1-x", pub, "ff/v1/mcp", false},
		{"platform publishes presence", platformID, "gw1-x", pub, "ff/v1/mcp/agents/gw1-x/status", false},
		{"platform subscribes to responses with +", platformID, "gw1-x", sub, "ff/v1/mcp/p1/u1/s1/e1/+/res", false},
		{"platform subscribes to responses with #", platformID, "gw1-x", sub, "ff/v1/mcp/p1/u1/s1/e1/i1/#", false},
		{"platform subscribes to all responses", platformID, "gw1-x", sub, "ff/v1/mcp/+/+/+/+/+/res", false},
		{"platform shares a response subscription", platformID, "gw1-x", sub, "$share/g/" + res, false},
		{"platform snoops requests", platformID, "gw1-x", sub, req, false},
		{"platform subscribes to the whole tree", platformID, "gw1-x", sub, "ff/v1/mcp/#", false},
		{"platform subscribes to #", platformID, "gw1-x", sub, "#", false},
		{"platform subscribes to presence with #", platformID, "gw1-x", sub, "ff/v1/mcp/agents/#", false},
		{"platform subscribes to presence with two +", platformID, "gw1-x", sub, "ff/v1/mcp/agents/+/+", false},
		{"platform subscribes to presence with a bad level", platformID, "gw1-x", sub, "ff/v1/mcp/agents/a.b/status", false},
		{"platform shares presence", platformID, "gw1-x", sub, "$share/g/ff/v1/mcp/agents/+/status", false},
		{"platform subscribes to $SYS", platformID, "gw1-x", sub, "$SYS/#", false},

		// Expert agent, allowed.
		{"agent subscribes to every request", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/+/+/+/req", true},
		{"agent shares every request", agentID, "agent1-a", sub, "$share/agent1/ff/v1/mcp/+/+/+/+/+/req", true},
		{"agent shares one platform's requests", agentID, "agent1-a", sub, "$share/grp/ff/v1/mcp/p1/+/+/+/+/req", true},
		{"agent subscribes to one context", agentID, "agent1-a", sub, req, true},
		{"agent publishes a response", agentID, "agent1-a", pub, res, true},
		{"agent publishes its own presence", agentID, "agent1-a", pub, "ff/v1/mcp/agents/agent1-a/status", true},
		// Expert agent, denied.
		{"agent forges a request", agentID, "agent1-a", pub, req, false},
		{"agent forges another client's presence", agentID, "agent1-a", pub, "ff/v1/mcp/agents/agent1-b/status", false},
		{"agent publishes presence with a wildcard", agentID, "agent1-a", pub, "ff/v1/mcp/agents/+/status", false},
		{"agent publishes presence with an invalid client ID", agentID, "a.b", pub, "ff/v1/mcp/agents/a.b/status", false},
		{"agent publishes presence with an empty client ID", agentID, "", pub, "ff/v1/mcp/agents//status", false},
		{"agent publishes presence with a slashed client ID", agentID, "a/b", pub, "ff/v1/mcp/agents/a/b/status", false},
		{"agent publishes below its presence", agentID, "agent1-a", pub, "ff/v1/mcp/agents/agent1-a/status/x", false},
		{"agent publishes a response with a wildcard", agentID, "agent1-a", pub, "ff/v1/mcp/p1/+/s1/e1/i1/res", false},
		{"agent snoops responses", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/+/+/+/res", false},
		{"agent subscribes to the whole tree", agentID, "agent1-a", sub, "ff/v1/mcp/#", false},
		{"agent subscribes to requests with #", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/+/+/#", false},
		{"agent subscribes to any last level", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/+/+/+/+", false},
		{"agent subscribes below req", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/+/+/+/req/#", false},
		{"agent subscribes to #", agentID, "agent1-a", sub, "#", false},
		{"agent subscribes to +/v1/#", agentID, "agent1-a", sub, "+/v1/#", false},
		{"agent subscribes to ff/+/mcp/...", agentID, "agent1-a", sub, "ff/+/mcp/+/+/+/+/+/req", false},
		{"agent subscribes with a bad level", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/a.b/+/+/req", false},
		{"agent subscribes to presence", agentID, "agent1-a", sub, "ff/v1/mcp/agents/+/status", false},
		{"agent shares with a bad group", agentID, "agent1-a", sub, "$share/a.b/ff/v1/mcp/+/+/+/+/+/req", false},
		{"agent shares with an empty group", agentID, "agent1-a", sub, "$share//ff/v1/mcp/+/+/+/+/+/req", false},
		{"agent shares with a wildcard group", agentID, "agent1-a", sub, "$share/+/ff/v1/mcp/+/+/+/+/+/req", false},
		{"agent shares the whole tree", agentID, "agent1-a", sub, "$share/g/ff/v1/mcp/#", false},
		{"agent shares #", agentID, "agent1-a", sub, "$share/g/#", false},
		{"agent shares a non-reserved filter", agentID, "agent1-a", sub, "$share/g/public/#", false},
		{"agent shares with no filter", agentID, "agent1-a", sub, "$share/g", false},
		{"agent subscribes to $SYS", agentID, "agent1-a", sub, "$SYS/#", false},

		// Plain client.
		{"client publishes a request", clientID1, "c1", pub, req, false},
		{"client publishes a response", clientID1, "c1", pub, res, false},
		{"client subscribes to requests", clientID1, "c1", sub, "ff/v1/mcp/+/+/+/+/+/req", false},
		{"client subscribes to a response", clientID1, "c1", sub, res, false},
		{"client publishes presence", clientID1, "c1", pub, "ff/v1/mcp/agents/c1/status", false},

		// Disabled identities may do nothing.
		{"disabled platform publishes a request", disabled(platformID), "gw1-x", pub, req, false},
		{"disabled platform subscribes to a response", disabled(platformID), "gw1-x", sub, res, false},
		{"disabled agent subscribes to requests", disabled(agentID), "agent1-a", sub, "$share/agent1/ff/v1/mcp/+/+/+/+/+/req", false},
		{"disabled agent publishes presence", disabled(agentID), "agent1-a", pub, "ff/v1/mcp/agents/agent1-a/status", false},
		{"disabled client uses its rule", disabled(clientID1), "c1", pub, "sensors/a/temp", false},
		{"disabled client uses a global rule", disabled(clientID1), "c1", sub, "public/#", false},

		// Operator rules.
		{"client publishes under its write rule", clientID1, "c1", pub, "sensors/a/temp", true},
		{"client publishes outside its write rule", clientID1, "c1", pub, "sensors/a/hum", false},
		{"write rule does not grant subscribe", clientID1, "c1", sub, "sensors/a/temp", false},
		{"client subscribes under a global read rule", clientID1, "c1", sub, "public/#", true},
		{"global read rule covers a narrower filter", clientID1, "c1", sub, "public/+/x", true},
		{"global read rule covers its parent topic", clientID1, "c1", sub, "public", true},
		{"read rule does not grant publish", clientID1, "c1", pub, "public/x", false},
		{"global rule applies to agents too", agentID, "agent1-a", sub, "public/news", true},
		{"readwrite rule grants publish", clientID1, "c1", pub, "devices/c1/led", true},
		{"readwrite rule grants subscribe", clientID1, "c1", sub, "devices/c1/#", true},
		{"rule does not cover a wider filter", clientID1, "c1", sub, "devices/+/#", false},
		{"another user's rule does not apply", clientID2, "c2", pub, "sensors/a/temp", false},
		{"another user uses a global rule", clientID2, "c2", sub, "public/x", true},
		{"injected # rule is ignored (subscribe)", clientID1, "c1", sub, "#", false},
		{"injected # rule is ignored (publish)", clientID1, "c1", pub, "anything/else", false},
		{"injected reserved rule is ignored", clientID1, "c1", sub, "ff/v1/mcp/#", false},
		{"injected $SYS rule is ignored", clientID1, "c1", sub, "$SYS/#", false},
		{"rule with unknown access is ignored", clientID1, "c1", pub, "other/x", false},
		{"subscribe to + is denied by default", clientID1, "c1", sub, "+", false},
		{"client shares under its rule", clientID1, "c1", sub, "$share/g/public/#", false},
		{"client publishes to $SYS", clientID1, "c1", pub, "$SYS/x", false},
		{"client publishes an empty topic", clientID1, "c1", pub, "", false},
		{"client subscribes to an empty filter", clientID1, "c1", sub, "", false},
		{"client publishes with NUL", clientID1, "c1", pub, "sensors/a\x00/temp", false},
		{"client publishes with +", clientID1, "c1", pub, "sensors/+/temp", false},
		{"client subscribes to a malformed filter", clientID1, "c1", sub, "public/#/x", false},
		{"client subscribes with a partial wildcard", clientID1, "c1", sub, "public/a+", false},

		// Odd inputs.
		{"identity without username", Identity{Role: RolePlatform}, "gw1-x", pub, req, false},
		{"unknown role", Identity{Username: "x", Role: "root"}, "x", pub, req, false},
		{"unknown action", platformID, "gw1-x", Action(0), req, false},
		{"another unknown action", platformID, "gw1-x", Action(3), res, false},
	}
	p := NewPolicy(testRules())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := p.Allow(c.id, c.clientID, c.action, c.topic); got != c.want {
				t.Fatalf("Allow(%s %s, %q, %s, %q) = %v, want %v", c.id.Role, c.id.Username, c.clientID, c.action, c.topic, got, c.want)
			}
		})
	}
}

func TestPolicyRulesDropsInvalid(t *testing.T) {
	p := NewPolicy(testRules())
	got := p.Rules()
	if len(got) != 3 {
		t.Fatalf("Rules() = %v, want the 3 valid rules", got)
	}
	for i, r := range got {
		if r.ID != int64(i+1) {
			t.Errorf("Rules()[%d].ID = %d, want %d", i, r.ID, i+1)
		}
	}
	got[0].Filter = "changed/#" // a copy: the policy must not change
	if p.Rules()[0].Filter != "public/#" {
		t.Fatal("Rules() returned the policy's own slice")
	}
}

func TestPolicyZeroValue(t *testing.T) {
	var p Policy
	if !p.Allow(platformID, "gw1-x", Publish, req) {
		t.Error("zero Policy denies a built-in rule")
	}
	if p.Allow(clientID1, "c1", Publish, "sensors/a/temp") {
		t.Error("zero Policy allows an operator topic")
	}
	if len(p.Rules()) != 0 {
		t.Error("zero Policy has rules")
	}
}

func TestPolicySetRulesWhileAllowRuns(t *testing.T) {
	p := NewPolicy(nil)
	withRule := []Rule{{Username: "c1", Access: AccessWrite, Filter: "sensors/#"}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p.Allow(clientID1, "c1", Publish, "sensors/x")
				if !p.Allow(platformID, "gw1-x", Publish, req) {
					t.Error("built-in rule denied during SetRules")
					return
				}
			}
		})
	}
	for i := range 200 {
		if i%2 == 0 {
			p.SetRules(withRule)
		} else {
			p.SetRules(nil)
		}
	}
	close(stop)
	wg.Wait()
	p.SetRules(withRule)
	if !p.Allow(clientID1, "c1", Publish, "sensors/x") {
		t.Fatal("rule set last is not in effect")
	}
}

// allowCases are the hot paths: the broker asks on every publish.
var allowCases = []struct {
	name     string
	id       Identity
	clientID string
	action   Action
	topic    string
}{
	{"platform_publish_req", platformID, "gw1-x", Publish, req},
	{"agent_publish_res", agentID, "agent1-a", Publish, res},
	{"agent_publish_presence", agentID, "agent1-a", Publish, "ff/v1/mcp/agents/agent1-a/status"},
	{"agent_subscribe_share", agentID, "agent1-a", Subscribe, "$share/agent1/ff/v1/mcp/+/+/+/+/+/req"},
	{"platform_subscribe_res", platformID, "gw1-x", Subscribe, res},
	{"client_publish_rule", clientID1, "c1", Publish, "devices/c1/led/state"},
	{"client_subscribe_rule", clientID1, "c1", Subscribe, "public/+/x"},
	{"denied_spoofed_res", platformID, "gw1-x", Publish, res},
	{"denied_no_rule", clientID2, "c2", Publish, "devices/c1/led/state"},
}

func TestPolicyAllowDoesNotAllocate(t *testing.T) {
	p := NewPolicy(testRules())
	for _, c := range allowCases {
		t.Run(c.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, func() { p.Allow(c.id, c.clientID, c.action, c.topic) }); n != 0 {
				t.Fatalf("Allow allocates %v times per call", n)
			}
		})
	}
}

func BenchmarkPolicyAllow(b *testing.B) {
	rules := testRules()
	// A realistic handful of operator rules besides the test ones.
	for _, f := range []string{"plant/+/line/#", "telemetry/+/+", "alerts/#", "cmd/c1/#", "status/+"} {
		rules = append(rules, Rule{Username: "c9", Access: AccessReadWrite, Filter: f})
		rules = append(rules, Rule{Username: "", Access: AccessRead, Filter: "shared/" + f})
	}
	p := NewPolicy(rules)
	for _, c := range allowCases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Allow(c.id, c.clientID, c.action, c.topic)
			}
		})
	}
}
