package oauth

import (
	"net/url"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/contract"
)

// FuzzRedirectAllowed: a redirect URI that is not the registered string is
// allowed only as RFC 8252 section 7.3 says, and only in a form a browser
// cannot read otherwise: "http://" and the registered loopback host, a
// port of digits, then the registered path and query, byte for byte. An
// authorization code must never be sent elsewhere.
func FuzzRedirectAllowed(f *testing.F) {
	for _, seed := range [][2]string{
		{"http://127.0.0.1/cb", "http://127.0.0.1:49152/cb"},
		{"http://localhost:3000/callback?x=1", "http://localhost:8080/callback?x=1"},
		{"http://[::1]/cb", "http://[::1]:1/cb"},
		{"https://app.example/cb", "https://app.example:444/cb"},
		{"http://127.0.0.1/cb", `http://127.0.0.1:1\@evil.example/cb`},
		{"http://127.0.0.1/cb", "http://127.0.0.1:1@evil.example/cb"},
		{"http://127.0.0.1/cb", "http://127.0.0.1:1/cb#x"},
		{"http://127.0.0.1/c%62", "http://127.0.0.1:1/cb"},
		{"http://localhost/cb", "http://LOCALHOST:1/cb"},
		{"com.example.app:/cb", "com.example.app:/cb"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, reg, uri string) {
		if checkRedirectURI(reg, DefaultMaxRedirectURILen) != nil || !redirectAllowed([]string{reg}, uri) || uri == reg {
			return
		}
		r, err := url.Parse(reg)
		if err != nil {
			t.Fatalf("registered %q does not parse: %v", reg, err)
		}
		host := r.Host
		if r.Port() != "" {
			host = strings.TrimSuffix(r.Host, ":"+r.Port())
		}
		if !strings.HasPrefix(uri, "http://"+host+":") {
			t.Fatalf("%q allowed for %q: not the registered loopback host with a port", uri, reg)
		}
		rest := strings.TrimPrefix(uri, "http://"+host+":")
		port := rest[:len(rest)-len(strings.TrimLeft(rest, "0123456789"))]
		want := "http://" + host + ":" + port + r.EscapedPath()
		if r.RawQuery != "" || r.ForceQuery {
			want += "?" + r.RawQuery
		}
		if r.Scheme != "http" || !loopbackHost(r.Hostname()) || uri != want {
			t.Fatalf("%q allowed for %q; only %q (another port) may be", uri, reg, want)
		}
	})
}

// FuzzUserID: every claim value maps to a valid user ID that keeps the
// prefix put before it, and two values never to the same ID.
func FuzzUserID(f *testing.F) {
	for _, seed := range [][2]string{
		{"alice", "bob"},
		{"a.b@x", "a_b@x"},
		{"a_b_x-" + hashHex("a.b@x")[:userIDHashLen], "a.b@x"},
		{strings.Repeat("x", 200) + "1", strings.Repeat("x", 200) + "2"},
		{"张三", "李四"},
		{"auth0|5f7c", "auth0_5f7c"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		const prefix = "sso-"
		for _, v := range []string{a, b} {
			if v == "" {
				return
			}
			if id := userID(prefix + v); !contract.ValidLevel(id) || !strings.HasPrefix(id, prefix) {
				t.Fatalf("userID(%q) = %q: not a valid level starting with %q", prefix+v, id, prefix)
			}
		}
		if a != b && userID(a) == userID(b) {
			t.Fatalf("userID(%q) = userID(%q) = %q", a, b, userID(a))
		}
	})
}
