package oauth

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

func TestUserID(t *testing.T) {
	for _, tc := range []struct{ claim, want string }{
		{"Bob-Smith_2", "Bob-Smith_2"}, // a level already: kept
		{"", ""},
		{"alice@example.com", "alice_example_com-" + hashHex("alice@example.com")[:16]},
		// A level that ends like a hashed ID is hashed too.
		{"alice_example_com-" + hashHex("alice@example.com")[:16], "alice_example_com-" + hashHex("alice@example.com")[:16] + "-" + hashHex("alice_example_com-" + hashHex("alice@example.com")[:16])[:16]},
		{"build-0123456789abcdeF", "build-0123456789abcdeF"}, // upper case: not a hash
	} {
		if got := userID(tc.claim); got != tc.want {
			t.Errorf("userID(%q) = %q, want %q", tc.claim, got, tc.want)
		}
	}
	// One-to-one: values that differ only in replaced characters, or
	// beyond the cut, get different IDs, each a valid level.
	seen := map[string]string{}
	for _, claim := range []string{"a.b@x", "a_b@x", "a-b@x", "张三", "李四", strings.Repeat("x", 200) + "1", strings.Repeat("x", 200) + "2", "auth0|5f7c",
		"a_b_x-" + hashHex("a.b@x")[:16], "a_b_x-" + hashHex("a_b@x")[:16]} {
		id := userID(claim)
		if !contract.ValidLevel(id) {
			t.Errorf("userID(%q) = %q: not a valid level", claim, id)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("userID(%q) = userID(%q) = %q", claim, other, id)
		}
		seen[id] = claim
	}
}

// TestUserPrefixChecked: a prefix that would not leave a valid topic
// level is refused when the server is made.
func TestUserPrefixChecked(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"sso-", true},
		{strings.Repeat("p", maxUserPrefix), true},
		{strings.Repeat("p", maxUserPrefix+1), false},
		{"sso/", false},
		{"sso+", false},
	} {
		_, err := New(Options{
			Store: (*store.Store)(nil), Issuer: func(*http.Request) string { return "" },
			Resource: func(*http.Request, string) bool { return true }, DefaultResource: func(*http.Request) string { return "" },
			OIDC: OIDCOptions{Issuer: "https://login.example.com", ClientID: "toolbus", UserPrefix: tc.prefix},
		})
		if (err == nil) != tc.ok {
			t.Errorf("UserPrefix %q: %v, want accepted %t", tc.prefix, err, tc.ok)
		}
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

// TestClientAddr: the server reads X-Forwarded-For from its trusted
// proxies only (netsrc.ClientKey has the cases).
func TestClientAddr(t *testing.T) {
	s := &Server{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	for _, tc := range []struct {
		name, remote, xff, want string
	}{
		{"direct, forged header ignored", "203.0.113.7:5000", "198.51.100.1", "203.0.113.7"},
		{"through a trusted proxy", "10.1.2.3:5000", "198.51.100.1", "198.51.100.1"},
		{"IPv6 by its /64", "[2001:db8:1:2:3:4:5:6]:5000", "", "2001:db8:1:2::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/oauth/token", nil)
			r.RemoteAddr = tc.remote
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if got := s.clientAddr(r); got != tc.want {
				t.Fatalf("clientAddr = %q, want %q", got, tc.want)
			}
		})
	}
}
