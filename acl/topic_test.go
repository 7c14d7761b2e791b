package acl

import (
	"errors"
	"strings"
	"testing"
)

func TestValidTopicFilter(t *testing.T) {
	for _, tc := range []struct {
		f  string
		ok bool
	}{
		{"a", true}, {"a/b/c", true}, {"#", true}, {"+", true}, {"a/+/c", true}, {"a/#", true},
		{"+/+/#", true}, {"/", true}, {"a//b", true}, {"$SYS/#", true},
		{"", false}, {"a/#/b", false}, {"a#", false}, {"a/b#", false}, {"a+/b", false},
		{"a/+b", false}, {"##", false}, {"a\x00b", false}, {strings.Repeat("a", maxTopicLength+1), false},
	} {
		if got := validTopicFilter(tc.f); got != tc.ok {
			t.Errorf("validTopicFilter(%q) = %v, want %v", tc.f, got, tc.ok)
		}
	}
}

func TestTopicMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
		{"a/+", "a/b", true},
		{"a/+", "a/", true},
		{"a/+", "a", false},
		{"a/+", "a/b/c", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"a/#", "b", false},
		{"#", "a/b", true},
		{"+/+", "/a", true},
		{"+", "/a", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
	} {
		if got := topicMatches(tc.filter, tc.topic); got != tc.want {
			t.Errorf("topicMatches(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
}

func TestFilterCovers(t *testing.T) {
	for _, tc := range []struct {
		rule, req string
		want      bool
	}{
		{"sensors/#", "sensors/+/t", true},
		{"sensors/#", "sensors/#", true},
		{"sensors/#", "sensors", true},
		{"sensors/#", "sensors/a/b/c", true},
		{"sensors/#", "#", false},
		{"sensors/#", "+/t", false},
		{"sensors/+/t", "sensors/a/t", true},
		{"sensors/+/t", "sensors/+/t", true},
		{"sensors/+/t", "sensors/#", false},
		{"sensors/+/t", "sensors/a/+", false},
		{"sensors/+/t", "sensors/a/t/x", false},
		{"sensors/+/t", "sensors/a", false},
		{"sensors/a", "sensors/+", false},
		{"+/#", "a", true},
		{"+/#", "a/#", true},
		{"+/+/#", "a", false},
		{"#", "anything/+/#", true},
		{"a/b", "a/b", true},
		{"a/b", "a/b/#", false},
	} {
		if got := filterCovers(tc.rule, tc.req); got != tc.want {
			t.Errorf("filterCovers(%q, %q) = %v, want %v", tc.rule, tc.req, got, tc.want)
		}
	}
}

func TestReachesReserved(t *testing.T) {
	for _, tc := range []struct {
		f    string
		want bool
	}{
		// Contract v2: everything under ff/v2/.
		{"ff/v2/mcp/a/_/b/c/d/e/f/req", true},
		{"ff/v2/mcp/a/b/status", true},
		{"ff/v2/probe/gw1/x", true},
		{"ff/v2/other", true},
		{"ff/v2/", true},
		{"ff/v2/#", true},
		{"ff/v2/+", true},
		{"ff/+/x", true},
		{"+/v2/#", true},
		{"+/v2/x", true},
		{"+/+/+", true},
		{"+/+/#", true},
		{"+/#", true},
		{"ff/#", true},
		{"#", true},
		{"ff/+/mcp/#", true},
		{"+/+/+/+/+/+/+/+/+/+/req", true},
		{"ff/v2", false},
		{"ff/+", false},
		{"+/v2", false},
		{"+/+", false},
		{"ff/v2x/mcp/#", false},
		{"ff/V2/mcp/#", false},
		{"/ff/v2/mcp/x", false},
		{"fff/v2/x", false},
		// Contract v1: ff/v1/mcp and below.
		{"ff/v1/mcp/a/b/c/d/e/req", true},
		{"ff/v1/mcp", true},
		{"ff/v1/mcp/", true},
		{"+/v1/#", true},
		{"ff/v1/#", true},
		{"ff/v1/+", true},
		{"ff/v1/+/x", true},
		{"ff/v1", false},
		{"ff/v1/mcpx/#", false},
		{"ff/v1/other/#", false},
		{"+/v1/x", false},
		{"/ff/v1/mcp/x", false},
		// Elsewhere.
		{"+", false},
		{"ff", false},
		{"sensors/#", false},
		{"sensors/+/x", false},
	} {
		if got := reachesReserved(tc.f); got != tc.want {
			t.Errorf("reachesReserved(%q) = %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestValidateRuleFilter(t *testing.T) {
	for _, tc := range []struct {
		f  string
		ok bool
	}{
		{"sensors/#", true},
		{"sensors/+/temp", true},
		{"ff/v1/other/#", true},
		{"ff/v3/mcp/#", true},
		{"ff/v2", true},
		{"+/+", true},
		{"+/status", true},
		{"#", false},
		{"ff/#", false},
		{"+/v1/#", false},
		{"+/v2/#", false},
		{"ff/+/mcp/x", false},
		{"ff/v2/mcp/+/+/status", false},
		{"ff/v2/probe/gw1/+", false},
		{"ff/v1/mcp/agents/+/status", false},
		{"$SYS/#", false},
		{"$share/g/sensors/#", false},
		{"a/#/b", false},
		{"", false},
		{"bad\xff", false},
	} {
		err := ValidateRuleFilter(tc.f)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidRule)) {
			t.Errorf("ValidateRuleFilter(%q) = %v, want ok=%v", tc.f, err, tc.ok)
		}
	}
}

func TestProbeTopic(t *testing.T) {
	gw := Identity{Username: "gw1", Role: RolePlatform}
	topic := ProbeTopic(gw.Username, "a1B2-_")
	if topic != "ff/v2/probe/gw1/a1B2-_" {
		t.Fatalf("ProbeTopic = %q", topic)
	}
	// The topic the gateway builds is the one its own policy grants it,
	// both ways, and no one else.
	var p Policy
	for _, action := range []Action{Publish, Subscribe} {
		if !p.Allow(gw, "gw1-x", action, topic) {
			t.Errorf("Policy refuses %s on ProbeTopic to its owner", action)
		}
		if p.Allow(Identity{Username: "gw2", Role: RolePlatform}, "gw2-x", action, topic) {
			t.Errorf("Policy grants %s on gw1's ProbeTopic to gw2", action)
		}
	}
}

func TestSplitShare(t *testing.T) {
	for _, tc := range []struct {
		in, group, filter string
		ok                bool
	}{
		{"$share/g/a/b", "g", "a/b", true},
		{"$share/g/#", "g", "#", true},
		{"$share//a", "", "a", true},
		{"$share/g", "", "", false},
		{"$share/g/", "", "", false},
		{"$SHARE/g/a", "", "", false},
		{"a/b", "", "", false},
	} {
		g, f, ok := splitShare(tc.in)
		if g != tc.group || f != tc.filter || ok != tc.ok {
			t.Errorf("splitShare(%q) = %q, %q, %v; want %q, %q, %v", tc.in, g, f, ok, tc.group, tc.filter, tc.ok)
		}
	}
}
