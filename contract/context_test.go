package contract_test

import (
	"testing"

	"github.com/toolbus/toolbus/contract"
)

func TestTopics(t *testing.T) {
	c := contract.Context{PlatformID: "gw", UserID: "alice", SessionID: "s1", EntityType: contract.NoEntity, EntityID: contract.NoEntity}
	for _, tc := range []struct{ name, got, want string }{
		{"request to the pool", c.RequestTopic("search", contract.AnyInstance), "ff/v2/mcp/search/_/gw/alice/s1/_/_/req"},
		{"request to an instance", c.RequestTopic("search", "search-1"), "ff/v2/mcp/search/search-1/gw/alice/s1/_/_/req"},
		{"reply", c.ReplyTopic("search", "search-1"), "ff/v2/mcp/search/search-1/gw/alice/s1/_/_/res"},
		{"reply filter", c.ReplyFilter(), "ff/v2/mcp/+/+/gw/alice/s1/_/_/res"},
		{"pool's requests", contract.RequestFilter("search", contract.AnyInstance), "ff/v2/mcp/search/_/+/+/+/+/+/req"},
		{"shared", contract.SharedRequestFilter("search"), "$share/search/ff/v2/mcp/search/_/+/+/+/+/+/req"},
		{"presence", contract.PresenceTopic("search", "search-1"), "ff/v2/mcp/search/search-1/status"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}

	tp, err := contract.ParseTopic(c.ReplyTopic("search", "search-1"))
	if err != nil || tp.Agent != "search" || tp.Instance != "search-1" || tp.Context != c || tp.Kind != contract.Reply {
		t.Errorf("ParseTopic(reply) = %+v, %v", tp, err)
	}
	if got, err := contract.ParseReplyFilter(c.ReplyFilter()); err != nil || got != c {
		t.Errorf("ParseReplyFilter = %+v, %v", got, err)
	}
	for _, bad := range []string{
		"ff/v1/mcp/gw/alice/s1/_/_/req",           // contract v1
		"ff/v2/mcp/+/+/gw/alice/s1/_/_/res",       // a filter, not a topic
		"ff/v2/mcp/search/_/gw/alice/s1/_/_/resx", // not req or res
		"ff/v2/mcp/search/_/gw/alice/s1/_/req",    // a level short
		"ff/v2/mcp/sea.rch/_/gw/alice/s1/_/_/req", // an invalid agent level
	} {
		if _, err := contract.ParseTopic(bad); err == nil {
			t.Errorf("ParseTopic(%q) accepted", bad)
		}
	}
	if _, err := contract.ParseReplyFilter("ff/v2/mcp/a/+/gw/alice/s1/_/_/res"); err == nil {
		t.Error("ParseReplyFilter accepted a filter with an agent")
	}

	for _, tc := range []struct {
		topic, agent, instance string
		ok                     bool
	}{
		{"ff/v2/mcp/search/search-1/status", "search", "search-1", true},
		{"ff/v2/mcp/search/+/status", "", "", false},
		{"ff/v2/mcp/search/status", "", "", false},
		{"ff/v1/mcp/agents/search-1/status", "", "", false},
		{"ff/v2/mcp/search/a/b/status", "", "", false},
	} {
		agent, instance, ok := contract.ParsePresenceTopic(tc.topic)
		if agent != tc.agent || instance != tc.instance || ok != tc.ok {
			t.Errorf("ParsePresenceTopic(%q) = %q %q %v", tc.topic, agent, instance, ok)
		}
	}
}
