package oauth

import (
	"net/url"
	"strings"
)

// NormalizeResource returns resource, an RFC 8707 resource indicator, in
// the form toolbus compares and keeps as a token's audience: its scheme and
// host lower-cased (RFC 3986 section 6.2.2.1: they are case-insensitive,
// and the MCP specification has servers accept either), everything else
// as written, so that a trailing "/" still names another resource. It
// reports false for what cannot be a resource indicator: not an absolute
// URL with a host, or one with a fragment or credentials.
func NormalizeResource(resource string) (string, bool) {
	u, err := url.Parse(resource)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Fragment != "" || strings.Contains(resource, "#") || u.User != nil || u.Opaque != "" {
		return "", false
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	return u.String(), true
}

// sameResource reports whether resource, as a client sent it, names
// audience (a normalized resource): exactly, but for the case of the scheme
// and host.
func sameResource(resource, audience string) bool {
	r, ok := NormalizeResource(resource)
	return ok && r == audience
}
