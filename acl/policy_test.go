package acl

import (
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/contract"
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
		{ID: 9, Username: "c1", Access: AccessReadWrite, Filter: "ff/v2/mcp/c1/#"},
		{ID: 10, Username: "", Access: AccessReadWrite, Filter: "ff/v2/probe/#"},
		{ID: 11, Username: "", Access: AccessReadWrite, Filter: "+/v2/#"},
	}
}

// Topics of contract v2, for agent1 (instance agent1-a) and gateway gw1.
const (
	req      = "ff/v2/mcp/agent1/_/p1/u1/s1/e1/i1/req"        // to agent1's pool
	reqInst  = "ff/v2/mcp/agent1/agent1-a/p1/u1/s1/e1/i1/req" // to one instance
	plain    = "ff/v2/mcp/agent1/_/p1/u1/s1/_/_/req"          // no entity
	res      = "ff/v2/mcp/agent1/agent1-a/p1/u1/s1/e1/i1/res"
	replies  = "ff/v2/mcp/+/+/p1/u1/s1/e1/i1/res" // the gateway's filter for one context
	requests = "ff/v2/mcp/agent1/_/+/+/+/+/+/req" // agent1's pool, every context
	shared   = "$share/agent1/" + requests
	presence = "ff/v2/mcp/agent1/agent1-a/status"
	probe    = "ff/v2/probe/gw1/gw1-x-a"
	v1req    = "ff/v1/mcp/p1/u1/s1/e1/i1/req"
	v1res    = "ff/v1/mcp/p1/u1/s1/e1/i1/res"
)

func TestPolicyAllow(t *testing.T) {
	long := strings.Repeat("a", contract.MaxLevelLen+1)
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
		{"platform publishes a request to a pool", platformID, "gw1-x", pub, req, true},
		{"platform publishes a request to an instance", platformID, "gw1-x", pub, reqInst, true},
		{"platform publishes a request without entity", platformID, "gw1-x", pub, plain, true},
		{"platform publishes a request to any agent name", platformID, "gw1-x", pub, "ff/v2/mcp/other-agent/x_1/p1/u1/s1/e1/i1/req", true},
		{"platform subscribes to a context's replies", platformID, "gw1-x", sub, replies, true},
		{"platform subscribes to replies without entity", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/p1/u1/s1/_/_/res", true},
		{"platform subscribes to all presence", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/status", true},
		{"platform subscribes to one agent's presence", platformID, "gw1-x", sub, "ff/v2/mcp/agent1/+/status", true},
		{"platform subscribes to one instance's presence", platformID, "gw1-x", sub, presence, true},
		{"platform may use platformId mcp", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/mcp/u/s/e/i/req", true},
		{"platform may use agent name probe", platformID, "gw1-x", pub, "ff/v2/mcp/probe/_/p/u/s/e/i/req", true},

		// Platform, denied.
		{"platform spoofs a reply", platformID, "gw1-x", pub, res, false},
		{"platform publishes presence", platformID, "gw1-x", pub, "ff/v2/mcp/gw1/gw1-x/status", false},
		{"platform publishes with a wildcard agent", platformID, "gw1-x", pub, "ff/v2/mcp/+/_/p1/u1/s1/e1/i1/req", false},
		{"platform publishes with a wildcard context", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/+/u1/s1/e1/i1/req", false},
		{"platform publishes with #", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/#", false},
		{"platform publishes without instance", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/p1/u1/s1/e1/i1/req", false},
		{"platform publishes too few levels", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/req", false},
		{"platform publishes too many levels", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/i1/x/req", false},
		{"platform publishes below req", platformID, "gw1-x", pub, req + "/x", false},
		{"platform publishes trailing slash", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/i1/", false},
		{"platform publishes empty agent", platformID, "gw1-x", pub, "ff/v2/mcp//_/p1/u1/s1/e1/i1/req", false},
		{"platform publishes empty instance", platformID, "gw1-x", pub, "ff/v2/mcp/agent1//p1/u1/s1/e1/i1/req", false},
		{"platform publishes empty level", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1//s1/e1/i1/req", false},
		{"platform publishes level with $", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/$s/e1/i1/req", false},
		{"platform publishes agent with dot", platformID, "gw1-x", pub, "ff/v2/mcp/a.b/_/p1/u1/s1/e1/i1/req", false},
		{"platform publishes level with dot", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/a.b/req", false},
		{"platform publishes level with space", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u 1/s1/e1/i1/req", false},
		{"platform publishes level with NUL", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u\x001/s1/e1/i1/req", false},
		{"platform publishes level too long", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/" + long + "/req", false},
		{"platform publishes instance too long", platformID, "gw1-x", pub, "ff/v2/mcp/agent1/" + long + "/p1/u1/s1/e1/i1/req", false},
		{"platform publishes the mcp root", platformID, "gw1-x", pub, "ff/v2/mcp", false},
		{"platform publishes under another v2 tree", platformID, "gw1-x", pub, "ff/v2/other/agent1/_/p1/u1/s1/e1/i1/req", false},
		{"platform subscribes to one agent's replies", platformID, "gw1-x", sub, "ff/v2/mcp/agent1/+/p1/u1/s1/e1/i1/res", true},
		{"platform is delivered a reply (the topic name)", platformID, "gw1-x", sub, "ff/v2/mcp/agent1/agent1-a/p1/u1/s1/e1/i1/res", true},
		{"platform subscribes to one agent's replies, badly named", platformID, "gw1-x", sub, "ff/v2/mcp/age.nt1/+/p1/u1/s1/e1/i1/res", false},
		{"platform subscribes to replies with + in the context", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/p1/u1/s1/e1/+/res", false},
		{"platform subscribes to replies with #", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/p1/u1/s1/e1/#", false},
		{"platform subscribes to every reply of one gateway", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/p1/+/+/+/+/res", true},
		{"platform subscribes to every reply of every gateway", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/+/+/+/+/+/res", false},
		{"platform subscribes to a gateway's replies with #", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/p1/#", false},
		{"agent subscribes to every reply of one gateway", agentID, "a1", sub, "ff/v2/mcp/+/+/p1/+/+/+/+/res", false},
		{"platform subscribes to all replies", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/+/+/+/+/+/res", false},
		{"platform subscribes to replies with a bad level", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/p1/u1/s.1/e1/i1/res", false},
		{"platform shares a reply subscription", platformID, "gw1-x", sub, "$share/gw1/" + replies, false},
		{"platform snoops requests", platformID, "gw1-x", sub, req, false},
		{"platform snoops a pool's requests", platformID, "gw1-x", sub, requests, false},
		{"platform subscribes to the whole tree", platformID, "gw1-x", sub, "ff/v2/mcp/#", false},
		{"platform subscribes to ff/v2/#", platformID, "gw1-x", sub, "ff/v2/#", false},
		{"platform subscribes to #", platformID, "gw1-x", sub, "#", false},
		{"platform subscribes to presence with #", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/#", false},
		{"platform subscribes to presence with three +", platformID, "gw1-x", sub, "ff/v2/mcp/+/+/+", false},
		{"platform subscribes to presence by instance only", platformID, "gw1-x", sub, "ff/v2/mcp/+/agent1-a/status", false},
		{"platform subscribes to presence with a bad agent", platformID, "gw1-x", sub, "ff/v2/mcp/a.b/+/status", false},
		{"platform subscribes to presence with a bad instance", platformID, "gw1-x", sub, "ff/v2/mcp/agent1/a.b/status", false},
		{"platform subscribes below presence", platformID, "gw1-x", sub, presence + "/x", false},
		{"platform shares presence", platformID, "gw1-x", sub, "$share/gw1/ff/v2/mcp/+/+/status", false},
		{"platform subscribes to $SYS", platformID, "gw1-x", sub, "$SYS/#", false},

		// Expert agent, allowed.
		{"agent subscribes to its pool's requests", agentID, "agent1-a", sub, requests, true},
		{"agent shares its pool's requests", agentID, "agent1-a", sub, shared, true},
		{"agent shares one platform's requests", agentID, "agent1-a", sub, "$share/agent1/ff/v2/mcp/agent1/_/p1/+/+/+/+/req", true},
		{"agent subscribes to its own instance's requests", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/agent1-a/+/+/+/+/+/req", true},
		{"agent shares its own instance's requests", agentID, "agent1-a", sub, "$share/agent1/ff/v2/mcp/agent1/agent1-a/+/+/+/+/+/req", true},
		{"agent subscribes to one context", agentID, "agent1-a", sub, req, true},
		{"agent publishes a reply", agentID, "agent1-a", pub, res, true},
		{"agent publishes a reply without entity", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/agent1-a/p1/u1/s1/_/_/res", true},
		{"agent publishes its own presence", agentID, "agent1-a", pub, presence, true},
		{"agent whose client ID is _ replies", agentID, "_", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/i1/res", false},
		{"agent whose client ID is _ announces itself", agentID, "_", pub, "ff/v2/mcp/agent1/_/status", false},

		// Expert agent, denied.
		{"agent forges a request", agentID, "agent1-a", pub, req, false},
		{"agent forges a request to itself", agentID, "agent1-a", pub, reqInst, false},
		{"agent reads another agent's requests", agentID, "agent1-a", sub, "ff/v2/mcp/agent2/_/+/+/+/+/+/req", false},
		{"agent shares another agent's requests", agentID, "agent1-a", sub, "$share/agent2/ff/v2/mcp/agent2/_/+/+/+/+/+/req", false},
		{"agent reads every agent's requests", agentID, "agent1-a", sub, "ff/v2/mcp/+/_/+/+/+/+/+/req", false},
		{"agent reads another instance's requests", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/agent1-b/+/+/+/+/+/req", false},
		{"agent shares another instance's requests", agentID, "agent1-a", sub, "$share/agent1/ff/v2/mcp/agent1/agent1-b/+/+/+/+/+/req", false},
		{"agent reads every instance's requests", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/+/+/+/+/+/+/req", false},
		{"agent with an invalid client ID reads its instance's requests", agentID, "a.b", sub, "ff/v2/mcp/agent1/a.b/+/+/+/+/+/req", false},
		{"agent shares in another group", agentID, "agent1-a", sub, "$share/grp/" + requests, false},
		{"agent shares in another agent's group", agentID, "agent1-a", sub, "$share/agent2/" + requests, false},
		{"agent shares with an empty group", agentID, "agent1-a", sub, "$share//" + requests, false},
		{"agent shares with a wildcard group", agentID, "agent1-a", sub, "$share/+/" + requests, false},
		{"agent replies under another username", agentID, "agent1-a", pub, "ff/v2/mcp/agent2/agent1-a/p1/u1/s1/e1/i1/res", false},
		{"agent replies under another client ID", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/agent1-b/p1/u1/s1/e1/i1/res", false},
		{"agent replies to the pool", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/_/p1/u1/s1/e1/i1/res", false},
		{"agent replies with an invalid client ID", agentID, "a.b", pub, "ff/v2/mcp/agent1/a.b/p1/u1/s1/e1/i1/res", false},
		{"agent replies with a wildcard", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/agent1-a/p1/+/s1/e1/i1/res", false},
		{"agent replies with too few levels", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/agent1-a/p1/u1/s1/e1/res", false},
		{"agent announces another instance", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/agent1-b/status", false},
		{"agent announces under another username", agentID, "agent1-a", pub, "ff/v2/mcp/agent2/agent1-a/status", false},
		{"agent announces with a wildcard", agentID, "agent1-a", pub, "ff/v2/mcp/agent1/+/status", false},
		{"agent announces with an invalid client ID", agentID, "a.b", pub, "ff/v2/mcp/agent1/a.b/status", false},
		{"agent announces with an empty client ID", agentID, "", pub, "ff/v2/mcp/agent1//status", false},
		{"agent announces with a slashed client ID", agentID, "a/b", pub, "ff/v2/mcp/agent1/a/b/status", false},
		{"agent publishes below its presence", agentID, "agent1-a", pub, presence + "/x", false},
		{"agent snoops replies", agentID, "agent1-a", sub, "ff/v2/mcp/+/+/+/+/+/+/+/res", false},
		{"agent snoops a context's replies", agentID, "agent1-a", sub, replies, false},
		{"agent snoops its own replies", agentID, "agent1-a", sub, res, false},
		{"agent subscribes to presence", agentID, "agent1-a", sub, "ff/v2/mcp/+/+/status", false},
		{"agent subscribes to its own presence", agentID, "agent1-a", sub, presence, false},
		{"agent subscribes to the whole tree", agentID, "agent1-a", sub, "ff/v2/mcp/#", false},
		{"agent subscribes to its name's subtree", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/#", false},
		{"agent subscribes to requests with #", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/_/+/+/+/#", false},
		{"agent subscribes to any last level", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/_/+/+/+/+/+/+", false},
		{"agent subscribes below req", agentID, "agent1-a", sub, requests + "/#", false},
		{"agent subscribes to #", agentID, "agent1-a", sub, "#", false},
		{"agent subscribes to ff/#", agentID, "agent1-a", sub, "ff/#", false},
		{"agent subscribes to +/v2/#", agentID, "agent1-a", sub, "+/v2/#", false},
		{"agent subscribes to ff/+/mcp/...", agentID, "agent1-a", sub, "ff/+/mcp/agent1/_/+/+/+/+/+/req", false},
		{"agent subscribes with a bad level", agentID, "agent1-a", sub, "ff/v2/mcp/agent1/_/+/a.b/+/+/+/req", false},
		{"agent shares the whole tree", agentID, "agent1-a", sub, "$share/agent1/ff/v2/mcp/#", false},
		{"agent shares #", agentID, "agent1-a", sub, "$share/agent1/#", false},
		{"agent shares a non-reserved filter", agentID, "agent1-a", sub, "$share/agent1/public/#", false},
		{"agent shares with no filter", agentID, "agent1-a", sub, "$share/agent1", false},
		{"agent shares a v1 filter", agentID, "agent1-a", sub, "$share/agent1/ff/v1/mcp/+/+/+/+/+/req", false},
		{"agent subscribes to $SYS", agentID, "agent1-a", sub, "$SYS/#", false},

		// Probes: every role, on its own username only.
		{"platform publishes to its own probe topic", platformID, "gw1-x", pub, probe, true},
		{"platform subscribes to its own probe topic", platformID, "gw1-x", sub, "ff/v2/probe/gw1/gw1-x-b", true},
		{"client publishes to its own probe topic", clientID1, "c1", pub, "ff/v2/probe/c1/x", true},
		{"client subscribes to its own probe topic", clientID1, "c1", sub, "ff/v2/probe/c1/x", true},
		{"agent publishes to its own probe topic", agentID, "a", pub, "ff/v2/probe/agent1/x", true},
		{"agent subscribes to its own probe topic", agentID, "a", sub, "ff/v2/probe/agent1/x", true},
		{"unknown role probes", Identity{Username: "x", Role: "root"}, "x", pub, "ff/v2/probe/x/y", true},
		{"platform publishes to another's probe topic", platformID, "gw1-x", pub, "ff/v2/probe/gw2/x", false},
		{"platform subscribes to another's probe topic", platformID, "gw1-x", sub, "ff/v2/probe/agent1/x", false},
		{"platform probes under its client ID", platformID, "gw1-x", pub, "ff/v2/probe/gw1-x/x", false},
		{"platform probes with a wildcard", platformID, "gw1-x", sub, "ff/v2/probe/gw1/+", false},
		{"platform probes with #", platformID, "gw1-x", sub, "ff/v2/probe/gw1/#", false},
		{"platform subscribes to every probe", platformID, "gw1-x", sub, "ff/v2/probe/+/x", false},
		{"platform shares its probe topic", platformID, "gw1-x", sub, "$share/gw1/" + probe, false},
		{"platform probes below the probe level", platformID, "gw1-x", pub, probe + "/b", false},
		{"platform probes on its username alone", platformID, "gw1-x", pub, "ff/v2/probe/gw1", false},
		{"platform probes on an empty level", platformID, "gw1-x", pub, "ff/v2/probe/gw1/", false},
		{"platform probes with a bad level", platformID, "gw1-x", pub, "ff/v2/probe/gw1/a.b", false},
		{"platform probes at the v1 place", platformID, "gw1-x", pub, "ff/v1/mcp/probe/gw1/x", false},
		{"platform probes under mcp", platformID, "gw1-x", pub, "ff/v2/mcp/probe/gw1/x", false},
		{"invalid username probes", Identity{Username: "a.b", Role: RoleClient}, "a.b", pub, "ff/v2/probe/a.b/x", false},
		{"client reads requests through a probe-shaped context", clientID1, "c1", sub, "ff/v2/probe/c1/_/p/u/s/e/i/req", false},
		{"client injects a request through a probe-shaped context", clientID1, "c1", pub, "ff/v2/probe/c1/_/p/u/s/e/i/req", false},
		{"client named like an agent reads its requests", Identity{Username: "agent1", Role: RoleClient}, "agent1-a", sub, requests, false},
		{"client named like an agent replies", Identity{Username: "agent1", Role: RoleClient}, "agent1-a", pub, res, false},
		{"client named like an agent announces itself", Identity{Username: "agent1", Role: RoleClient}, "agent1-a", pub, presence, false},
		{"disabled platform probes", disabled(platformID), "gw1-x", pub, probe, false},

		// Contract v1 is refused to everyone.
		{"platform publishes a v1 request", platformID, "gw1-x", pub, v1req, false},
		{"platform subscribes to a v1 reply", platformID, "gw1-x", sub, v1res, false},
		{"platform subscribes to v1 presence", platformID, "gw1-x", sub, "ff/v1/mcp/agents/+/status", false},
		{"agent subscribes to v1 requests", agentID, "agent1-a", sub, "ff/v1/mcp/+/+/+/+/+/req", false},
		{"agent publishes a v1 reply", agentID, "agent1-a", pub, v1res, false},
		{"agent publishes v1 presence", agentID, "agent1-a", pub, "ff/v1/mcp/agents/agent1-a/status", false},
		{"client publishes a v1 request", clientID1, "c1", pub, v1req, false},
		{"client subscribes to the v1 tree", clientID1, "c1", sub, "ff/v1/mcp/#", false},
		{"client publishes the v1 root", clientID1, "c1", pub, "ff/v1/mcp", false},

		// Plain client.
		{"client publishes a request", clientID1, "c1", pub, req, false},
		{"client publishes a reply", clientID1, "c1", pub, res, false},
		{"client publishes a reply as itself", clientID1, "c1", pub, "ff/v2/mcp/c1/c1/p1/u1/s1/e1/i1/res", false},
		{"client subscribes to requests", clientID1, "c1", sub, requests, false},
		{"client subscribes to its own name's requests", clientID1, "c1", sub, "ff/v2/mcp/c1/_/+/+/+/+/+/req", false},
		{"client shares its own name's requests", clientID1, "c1", sub, "$share/c1/ff/v2/mcp/c1/_/+/+/+/+/+/req", false},
		{"client subscribes to replies", clientID1, "c1", sub, replies, false},
		{"client publishes presence", clientID1, "c1", pub, "ff/v2/mcp/c1/c1/status", false},
		{"client subscribes to presence", clientID1, "c1", sub, "ff/v2/mcp/+/+/status", false},

		// Disabled identities may do nothing.
		{"disabled platform publishes a request", disabled(platformID), "gw1-x", pub, req, false},
		{"disabled platform subscribes to replies", disabled(platformID), "gw1-x", sub, replies, false},
		{"disabled agent subscribes to requests", disabled(agentID), "agent1-a", sub, shared, false},
		{"disabled agent publishes a reply", disabled(agentID), "agent1-a", pub, res, false},
		{"disabled agent publishes presence", disabled(agentID), "agent1-a", pub, presence, false},
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
		{"injected v2 rule is ignored (subscribe)", clientID1, "c1", sub, "ff/v2/mcp/c1/_/+/+/+/+/+/req", false},
		{"injected v2 rule is ignored (publish)", clientID1, "c1", pub, "ff/v2/mcp/c1/c1/status", false},
		{"injected v2 probe rule is ignored", clientID2, "c2", pub, "ff/v2/probe/c1/x", false},
		{"injected v1 rule is ignored", clientID1, "c1", sub, "ff/v1/mcp/#", false},
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
		{"another unknown action", platformID, "gw1-x", Action(3), replies, false},
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
	{"agent_publish_presence", agentID, "agent1-a", Publish, presence},
	{"agent_subscribe_share", agentID, "agent1-a", Subscribe, shared},
	{"platform_subscribe_res", platformID, "gw1-x", Subscribe, replies},
	{"platform_subscribe_presence", platformID, "gw1-x", Subscribe, "ff/v2/mcp/+/+/status"},
	{"platform_publish_probe", platformID, "gw1-x", Publish, probe},
	{"denied_v1_req", platformID, "gw1-x", Publish, v1req},
	{"denied_cross_agent_res", agentID, "agent1-a", Publish, "ff/v2/mcp/agent2/agent1-a/p1/u1/s1/e1/i1/res"},
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
