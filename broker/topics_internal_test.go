package broker

import "testing"

// TestIsDirectFilter: one exact request or reply topic, or a context's
// reply filter, is kept off mochi's tree; any other filter, or any other
// topic, goes there.
func TestIsDirectFilter(t *testing.T) {
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		{"ff/v2/mcp/a/i/p/u/s/t/e/res", true},
		{"ff/v2/mcp/a/i/p/u/s/t/e/req", true},
		{"ff/v2/mcp/a/_/p/u/s/t/e/req", true},
		{"ff/v2/mcp/+/+/p/u/s/t/e/res", true}, // the context's reply filter
		{"ff/v2/mcp/+/+/p/u/s/t/e/req", false},
		{"ff/v2/mcp/a/+/p/u/s/t/e/res", false},
		{"ff/v2/mcp/+/i/p/u/s/t/e/res", false},
		{"ff/v2/mcp/+/+/p/+/s/t/e/res", false},
		{"ff/v2/mcp/+/+/+/+/+/+/+/res", false},
		{"ff/v2/mcp/a/_/+/+/+/+/+/req", false},
		{"ff/v2/mcp/+/+/p/u/s/t/e/#", false},
		{"ff/v2/mcp/a/i/p/u/s/t/e/#", false},
		{"ff/v2/mcp/a/i/p/u/s/t/res", false},     // a context level short
		{"ff/v2/mcp/a/i/p/u/s/t/e/x/res", false}, // one too many
		{"ff/v2/mcp/a/i/p/u/s/t/e/x", false},
		{"ff/v2/mcp/a/i/status", false},
		{"ff/v2/mcp/+/+/status", false},
		{"ff/v1/mcp/p/u/s/t/e/res", false},
		{"ff/v1/mcp/p/u/s/t/e/req", false},
		{"x/ff/v2/mcp/a/i/p/u/s/t/e/res", false},
		{"sensors/a", false},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			if got := isDirectFilter(tc.filter); got != tc.want {
				t.Errorf("isDirectFilter(%q) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

// TestReplyKey: every reply topic of a context, whoever sent it, and the
// context's reply filter share one key; nothing else has one.
func TestReplyKey(t *testing.T) {
	const key = "p/u/s/t/e/res"
	for _, tc := range []struct {
		topic, want string
		ok          bool
	}{
		{"ff/v2/mcp/a/i/p/u/s/t/e/res", key, true},
		{"ff/v2/mcp/b/j/p/u/s/t/e/res", key, true},
		{"ff/v2/mcp/+/+/p/u/s/t/e/res", key, true},
		{"ff/v2/mcp/a/i/p/u/s2/t/e/res", "p/u/s2/t/e/res", true},
		{"ff/v2/mcp/a/i/p/u/s/t/e/req", "", false},
		{"ff/v2/mcp/a/i/p/u/s/t/res", "", false},
		{"ff/v2/mcp/a/i/status", "", false},
		{"ff/v1/mcp/p/u/s/t/e/res", "", false},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			if got, ok := replyKey(tc.topic); got != tc.want || ok != tc.ok {
				t.Errorf("replyKey(%q) = %q, %v; want %q, %v", tc.topic, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestIsReplyFilter(t *testing.T) {
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		{"ff/v2/mcp/+/+/p/u/s/t/e/res", true},
		{"ff/v2/mcp/a/i/p/u/s/t/e/res", false}, // one exact reply topic
		{"ff/v2/mcp/+/+/p/u/s/t/e/req", false},
		{"ff/v2/mcp/+/+/p/u/+/t/e/res", false},
		{"ff/v2/mcp/+/+/p/u/s/t/#", false},
		{"ff/v2/mcp/+/i/p/u/s/t/e/res", false},
		{"ff/v1/mcp/+/+/p/u/s/t/e/res", false},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			if got := isReplyFilter(tc.filter); got != tc.want {
				t.Errorf("isReplyFilter(%q) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

func TestPresenceTopic(t *testing.T) {
	if got, want := presenceTopic("agent1", "agent1-a"), "ff/v2/mcp/agent1/agent1-a/status"; got != want {
		t.Errorf("presenceTopic = %q, want %q", got, want)
	}
}
