package oauth

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/acl"
)

func TestUserID(t *testing.T) {
	for _, tc := range []struct{ claim, want string }{
		{"Bob-Smith_2", "Bob-Smith_2"}, // a level already: kept
		{"", ""},
		{"alice@example.com", "alice_example_com-" + hashHex("alice@example.com")[:12]},
	} {
		if got := userID(tc.claim); got != tc.want {
			t.Errorf("userID(%q) = %q, want %q", tc.claim, got, tc.want)
		}
	}
	// One-to-one: values that differ only in replaced characters, or
	// beyond the cut, get different IDs, each a valid level.
	seen := map[string]string{}
	for _, claim := range []string{"a.b@x", "a_b@x", "a-b@x", "张三", "李四", strings.Repeat("x", 200) + "1", strings.Repeat("x", 200) + "2", "auth0|5f7c"} {
		id := userID(claim)
		if !acl.ValidLevel(id) {
			t.Errorf("userID(%q) = %q: not a valid level", claim, id)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("userID(%q) = userID(%q) = %q", claim, other, id)
		}
		seen[id] = claim
	}
}

func TestCheckDialAddr(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		public bool
	}{
		{"93.184.215.14:443", true},
		{"[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443", true},
		{"127.0.0.1:443", false},
		{"10.0.0.5:443", false},
		{"169.254.169.254:80", false}, // cloud metadata
		{"100.64.1.1:443", false},
		{"198.18.0.1:443", false},
		{"[::1]:443", false},
		{"[::ffff:10.0.0.5]:443", false}, // IPv4-mapped
		{"[64:ff9b::a00:5]:443", false},  // NAT64 of 10.0.0.5
		{"[2002:a00:5::1]:443", false},   // 6to4 of 10.0.0.5
		{"[2001:0:4136:e378::1]:443", false},
		{"[fe80::1]:443", false},
		{"[fc00::1]:443", false},
	} {
		err := checkDialAddr(tc.addr, false)
		if (err == nil) != tc.public {
			t.Errorf("checkDialAddr(%s) = %v, want public %t", tc.addr, err, tc.public)
		}
		if err := checkDialAddr(tc.addr, true); err != nil {
			t.Errorf("checkDialAddr(%s, allowPrivate) = %v", tc.addr, err)
		}
	}
}
