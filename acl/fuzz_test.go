package acl

import (
	"regexp"
	"strings"
	"testing"
)

// The fuzz targets check the hand-written, allocation-free code against a
// plain reference written with strings.Split and a regexp, straight from
// the contract's wording.

// levelRE is a topic level by the contract's wording
// (contract.ValidateLevel's own fuzz target holds it to this).
var levelRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func FuzzPolicyAllow(f *testing.F) {
	seeds := []struct {
		role             uint8
		disabled         bool
		username, client string
		subscribe        bool
		topic            string
	}{
		{0, false, "gw1", "gw1-x", false, req},
		{0, false, "gw1", "gw1-x", false, reqInst},
		{0, false, "gw1", "gw1-x", false, res},
		{0, false, "gw1", "gw1-x", true, replies},
		{0, false, "gw1", "gw1-x", true, "ff/v2/mcp/+/+/status"},
		{0, false, "gw1", "gw1-x", true, "ff/v2/mcp/agent1/+/status"},
		{0, false, "gw1", "gw1-x", true, "ff/v2/mcp/+/agent1-a/status"},
		{0, false, "gw1", "gw1-x", true, "$share/gw1/" + replies},
		{0, false, "gw1", "gw1-x", false, probe},
		{0, false, "gw1", "gw1-x", true, "ff/v2/probe/gw1/+"},
		{0, false, "gw1", "gw1-x", false, v1req},
		{1, false, "agent1", "agent1-a", true, shared},
		{1, false, "agent1", "agent1-a", true, "$share/agent2/" + requests},
		{1, false, "agent1", "agent1-a", true, "ff/v2/mcp/agent1/agent1-a/+/+/+/+/+/req"},
		{1, false, "agent1", "agent1-a", true, "ff/v2/mcp/agent1/agent1-b/+/+/+/+/+/req"},
		{1, false, "agent1", "agent1-a", true, "ff/v2/mcp/agent2/_/+/+/+/+/+/req"},
		{1, false, "agent1", "agent1-a", false, res},
		{1, false, "agent1", "agent1-b", false, res},
		{1, false, "agent2", "agent1-a", false, res},
		{1, false, "agent1", "agent1-a", false, presence},
		{1, false, "agent1", "agent1-b", false, presence},
		{1, false, "agent1", "a/b", false, "ff/v2/mcp/agent1/a/b/status"},
		{1, true, "agent1", "agent1-a", false, res},
		{1, false, "agent1", "agent1-a", true, "ff/v1/mcp/+/+/+/+/+/req"},
		{2, false, "c1", "c1", false, "ff/v2/probe/c1/x"},
		{2, false, "c1", "c1", false, "ff/v2/mcp/c1/c1/status"},
		{2, false, "c1", "c1", false, "sensors/x/temp"},
		{2, false, "c1", "c1", true, "public/+/x"},
		{2, false, "c1", "c1", true, "#"},
		{2, false, "c1", "c1", true, "$SYS/#"},
		{2, false, "c1", "c1", true, "+/v1/#"},
		{2, false, "c1", "c1", true, "+/v2/#"},
		{2, false, "c1", "c1", false, "ff/v2"},
		{3, false, "x", "x", false, "ff/v2/probe/x/y"},
		{0, false, "gw1", "gw1-x", false, req + "/"},
	}
	for _, s := range seeds {
		f.Add(s.role, s.disabled, s.username, s.client, s.subscribe, s.topic)
	}
	p := NewPolicy(testRules())
	roles := [...]Role{RolePlatform, RoleExpertAgent, RoleClient, Role("other")}
	f.Fuzz(func(t *testing.T, role uint8, dis bool, username, clientID string, subscribe bool, topic string) {
		id := Identity{Username: username, Role: roles[int(role)%len(roles)], Disabled: dis}
		action := Publish
		if subscribe {
			action = Subscribe
		}
		got := p.Allow(id, clientID, action, topic)
		want := refAllow(testRules(), id, clientID, subscribe, topic)
		if got != want {
			t.Fatalf("Allow(%+v, %q, %s, %q) = %v, reference says %v", id, clientID, action, topic, got, want)
		}
		if got && refReachesReserved(stripShare(topic)) && !refBuiltin(id, clientID, subscribe, topic) {
			t.Fatalf("Allow granted %q in a reserved tree outside the built-in rules", topic)
		}
	})
}

// refAllow is the contract's Policy, written plainly.
func refAllow(rules []Rule, id Identity, clientID string, subscribe bool, topic string) bool {
	if id.Disabled || id.Username == "" || topic == "" || strings.ContainsRune(topic, 0) || len(topic) > maxTopicLength {
		return false
	}
	if strings.HasPrefix(topic, "$") {
		return strings.HasPrefix(topic, "$share/") && refBuiltin(id, clientID, subscribe, topic)
	}
	if !refWellFormed(topic, subscribe) {
		return false
	}
	if refReachesReserved(topic) {
		return refBuiltin(id, clientID, subscribe, topic)
	}
	for _, r := range rules {
		if r.Validate() != nil || (r.Username != "" && r.Username != id.Username) {
			continue
		}
		if subscribe && r.Access&AccessRead != 0 && refCovers(r.Filter, topic) {
			return true
		}
		if !subscribe && r.Access&AccessWrite != 0 && refMatches(strings.Split(r.Filter, "/"), strings.Split(topic, "/")) {
			return true
		}
	}
	return false
}

func refWellFormed(topic string, filter bool) bool {
	levels := strings.Split(topic, "/")
	for i, l := range levels {
		if !filter && strings.ContainsAny(l, "+#") {
			return false
		}
		if filter && l != "+" && l != "#" && strings.ContainsAny(l, "+#") {
			return false
		}
		if filter && l == "#" && i != len(levels)-1 {
			return false
		}
	}
	return true
}

func stripShare(topic string) string {
	if parts := strings.SplitN(topic, "/", 3); len(parts) == 3 && parts[0] == "$share" {
		return parts[2]
	}
	return topic
}

// refReachesReserved reports whether filter could match a topic under
// ff/v2/ or ff/v1/mcp (itself included).
func refReachesReserved(filter string) bool {
	levels := strings.Split(filter, "/")
	reaches := func(tree ...string) bool {
		for i, want := range tree {
			if i >= len(levels) {
				return false
			}
			if levels[i] == "#" {
				return true
			}
			if levels[i] != "+" && levels[i] != want {
				return false
			}
		}
		return true
	}
	return reaches("ff", "v2") && len(levels) > 2 || reaches("ff", "v1", "mcp")
}

// refBuiltin is the contract's list of built-in rules.
func refBuiltin(id Identity, clientID string, subscribe bool, topic string) bool {
	share := false
	if strings.HasPrefix(topic, "$share/") {
		parts := strings.SplitN(topic, "/", 3)
		if len(parts) != 3 || parts[1] != id.Username {
			return false
		}
		share, topic = true, parts[2]
	}
	valid := levelRE.MatchString
	lv := strings.Split(topic, "/")
	if len(lv) < 3 || lv[0] != "ff" || lv[1] != "v2" {
		return false
	}
	if len(lv) == 5 && lv[2] == "probe" {
		return !share && lv[3] == id.Username && valid(id.Username) && valid(lv[4])
	}
	if lv[2] != "mcp" || len(lv) < 6 {
		return false
	}
	agent, instance := lv[3], lv[4]
	own := agent == id.Username && valid(agent) // the agent level is the client's username
	context := func(kind string, wild bool) bool {
		if len(lv) != 11 || lv[10] != kind {
			return false
		}
		for _, l := range lv[5:10] {
			if !valid(l) && !(wild && l == "+") {
				return false
			}
		}
		return true
	}
	presence := len(lv) == 6 && lv[5] == "status"
	switch {
	case id.Role == RolePlatform && !subscribe && !share:
		return valid(agent) && valid(instance) && context("req", false)
	case id.Role == RolePlatform && subscribe && !share:
		return agent == "+" && instance == "+" && presence ||
			(agent == "+" || valid(agent)) && (instance == "+" || valid(instance)) && context("res", false) ||
			presence && valid(agent) && (instance == "+" || valid(instance))
	case id.Role == RoleExpertAgent && subscribe:
		return own && (instance == "_" || instance == clientID && valid(clientID)) && context("req", true)
	case id.Role == RoleExpertAgent && !subscribe && !share:
		return own && instance == clientID && valid(clientID) && clientID != "_" && (context("res", false) || presence)
	}
	return false
}

// refMatches is MQTT topic matching on split levels.
func refMatches(filter, topic []string) bool {
	if len(filter) == 0 {
		return len(topic) == 0
	}
	if filter[0] == "#" {
		return true
	}
	if len(topic) == 0 {
		return false
	}
	if filter[0] != "+" && filter[0] != topic[0] {
		return false
	}
	if len(filter) == 2 && filter[1] == "#" && len(topic) == 1 {
		return true // "a/#" matches "a"
	}
	return refMatches(filter[1:], topic[1:])
}

// refCovers reports whether every topic req matches, rule matches: it
// matches req's levels as a topic where req's wildcards must meet the same
// wildcard (or a '#') in rule.
func refCovers(rule, req string) bool {
	r, q := strings.Split(rule, "/"), strings.Split(req, "/")
	for i := 0; ; i++ {
		if i < len(r) && r[i] == "#" {
			return true
		}
		if i == len(q) {
			return i == len(r) || (i == len(r)-1 && r[i] == "#")
		}
		if i == len(r) || q[i] == "#" {
			return false
		}
		if r[i] != "+" && (q[i] == "+" || r[i] != q[i]) {
			return false
		}
	}
}
