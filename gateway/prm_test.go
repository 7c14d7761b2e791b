package gateway_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/toolbus/toolbus/gateway"
)

// TestIsResource: what names an MCP endpoint of the gateway at the token
// and authorization endpoints (RFC 8707): scheme and host in any case, the
// path exactly (a trailing "/" is no endpoint), and the origin, which the
// root metadata names (RFC 9728 section 3.3).
func TestIsResource(t *testing.T) {
	r := httptest.NewRequest("POST", "http://gw.example:8080/oauth/token", nil)
	for _, tc := range []struct {
		publicURL, resource string
		want                bool
	}{
		{"", "http://gw.example:8080/api/v1/mcp", true},
		{"", "HTTP://GW.Example:8080/api/v1/mcp", true},
		{"", "http://gw.example:8080/api/v1/mcp/ticket/42", true},
		{"", "http://gw.example:8080", true},
		{"", "http://gw.example:8080/", true},
		{"", "http://gw.example:8080/api/v1/mcp/", false},
		{"", "http://gw.example:8080/api/v1/mcp/ticket/42/", false},
		{"", "http://gw.example:8080/API/v1/mcp", false},
		{"", "http://gw.example:8080/api/v1/mcpx", false},
		{"", "http://gw.example:8080/api/v1/mcp/ticket", false},
		{"", "http://gw.example:8080/api/v1/mcp#x", false},
		{"", "https://gw.example:8080/api/v1/mcp", false},
		{"", "http://other.example:8080/api/v1/mcp", false},
		{"", "http://gw.example:8080.evil/api/v1/mcp", false},
		{"https://mcp.example.com", "HTTPS://MCP.EXAMPLE.COM/api/v1/mcp", true},
		{"https://mcp.example.com", "http://gw.example:8080/api/v1/mcp", false},
	} {
		t.Run(tc.publicURL+" "+tc.resource, func(t *testing.T) {
			if got := gateway.IsResource(tc.publicURL, r, tc.resource); got != tc.want {
				t.Errorf("IsResource = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPublicURLWarning: plain http outside loopback starts, with a
// warning, since OAuth clients will not sign in over it.
func TestPublicURLWarning(t *testing.T) {
	for _, tc := range []struct {
		url  string
		warn bool
	}{
		{"https://mcp.example.com", false},
		{"http://localhost:8080", false},
		{"http://LOCALHOST", false},
		{"http://app.localhost:8080", false},
		{"http://127.0.0.1:8080", false},
		{"http://127.9.9.9", false},
		{"http://[::1]:8080", false},
		{"http://mcp.example.com", true},
		{"http://10.0.0.5:8080", true},
		{"http://[2001:db8::1]", true},
		{"http://localhost.example.com", true},
	} {
		t.Run(tc.url, func(t *testing.T) {
			u, err := gateway.CheckPublicURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			err = gateway.PublicURLWarning(u)
			if (err != nil) != tc.warn || (err != nil && !errors.Is(err, gateway.ErrPlainHTTP)) {
				t.Errorf("PublicURLWarning(%s) = %v, want a warning: %v", u, err, tc.warn)
			}
		})
	}
}
