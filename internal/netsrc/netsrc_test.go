package netsrc_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/toolbus/toolbus/internal/netsrc"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:1883", "127.0.0.1"},
		{"127.0.0.2", "127.0.0.2"},
		{"[2001:db8::1]:443", "2001:db8::/64"},
		{"[2001:db8::ffff:1]:443", "2001:db8::/64"},
		{"[2001:db8:0:1::1]:443", "2001:db8:0:1::/64"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"@unix", "@unix"},
	} {
		if got := netsrc.Key(tc.in); got != tc.want {
			t.Errorf("Key(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestClientKey(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		name, remote, xff, want string
	}{
		{"direct", "203.0.113.7:5000", "", "203.0.113.7"},
		{"direct, forged header ignored", "203.0.113.7:5000", "198.51.100.1", "203.0.113.7"},
		{"through a trusted proxy", "10.1.2.3:5000", "198.51.100.1", "198.51.100.1"},
		{"through two trusted proxies", "10.1.2.3:5000", "198.51.100.1, 10.9.9.9", "198.51.100.1"},
		{"a forged hop before the real one", "10.1.2.3:5000", "1.2.3.4, 198.51.100.1", "198.51.100.1"},
		{"trusted proxy, no header", "10.1.2.3:5000", "", "10.1.2.3"},
		{"unreadable hop", "10.1.2.3:5000", "junk", "10.1.2.3"},
		{"IPv6 by its /64", "[2001:db8:1:2:3:4:5:6]:5000", "", "2001:db8:1:2::/64"},
		{"IPv4-mapped", "[::ffff:203.0.113.7]:5000", "", "203.0.113.7"},
		{"IPv4-mapped trusted proxy", "[::ffff:10.1.2.3]:5000", "198.51.100.1", "198.51.100.1"},
		{"IPv6 proxy", "[::1]:5000", "2001:db8:1:2::9", "2001:db8:1:2::/64"},
		{"no IP address", "@unix", "198.51.100.1", "@unix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.RemoteAddr = tc.remote
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if got := netsrc.ClientKey(r, trusted); got != tc.want {
				t.Fatalf("ClientKey = %q, want %q", got, tc.want)
			}
		})
	}
}
