package broker

import "testing"

func TestMayMatchResponse(t *testing.T) {
	tests := []struct {
		filter string
		want   bool
	}{
		{"ff/v1/mcp/p/u/s/t/e/res", true},
		{"ff/v1/mcp/+/+/+/+/+/res", true},
		{"ff/v1/mcp/p/+/s/t/e/+", true},
		{"ff/v1/#", true},
		{"#", true},
		{"+/+/+/+/+/+/+/+/+", true},
		{"$share/g/ff/v1/mcp/+/+/+/+/+/res", true},
		{"$share/g/#", true},
		{"ff/v1/mcp/+/+/+/+/+/req", false},
		{"ff/v1/mcp/agents/+/status", false},
		{"ff/v1/mcp/p/u/s/t/e/res/x", false},
		{"ff/v1/mcp/p/u/s/t/res", false},
		{"ff/v2/mcp/+/+/+/+/+/res", false},
		{"sensors/#", false},
		{"$share/g", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(tc.filter, func(t *testing.T) {
			if got := mayMatchResponse(tc.filter); got != tc.want {
				t.Errorf("mayMatchResponse(%q) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

func TestIsResponseTopic(t *testing.T) {
	for topic, want := range map[string]bool{
		"ff/v1/mcp/p/u/s/t/e/res":   true,
		"ff/v1/mcp/p/u/s/t/e/req":   false,
		"ff/v1/mcp/p/u/s/t/res":     false,
		"x/ff/v1/mcp/p/u/s/t/e/res": false,
	} {
		if got := isResponseTopic(topic); got != want {
			t.Errorf("isResponseTopic(%q) = %v, want %v", topic, got, want)
		}
	}
}

func TestMatchKindRequest(t *testing.T) {
	tests := []struct {
		filter string
		want   filterMatch
	}{
		{"ff/v1/mcp/+/+/+/+/+/req", matchesAll},
		{"$share/agents/ff/v1/mcp/+/+/+/+/+/req", matchesAll},
		{"ff/v1/mcp/+/+/+/+/+/+", matchesAll},
		{"ff/v1/mcp/#", matchesAll},
		{"ff/#", matchesAll},
		{"#", matchesAll},
		{"+/+/+/+/+/+/+/+/+", matchesAll},
		{"ff/v1/mcp/gw1/+/+/+/+/req", matchesSome},
		{"ff/v1/mcp/+/u1/#", matchesSome},
		{"$share/g/ff/v1/mcp/+/+/+/t/e/req", matchesSome},
		{"ff/v1/mcp/+/+/+/+/+/res", matchesNone},
		{"ff/v1/mcp/agents/+/status", matchesNone},
		{"ff/v1/mcp/+/+/+/+/+/req/x", matchesNone},
		{"sensors/#", matchesNone},
		{"$share/g", matchesNone},
	}
	for _, tc := range tests {
		t.Run(tc.filter, func(t *testing.T) {
			if got := matchKind(tc.filter, requestFilterLevels); got != tc.want {
				t.Errorf("matchKind(%q, request) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}
