package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/store"
)

// PRMPath is where the gateway publishes its OAuth Protected Resource
// Metadata (RFC 9728). The metadata of the MCP endpoint MCPPath (or of an
// entity-scoped one) is at PRMPath followed by that path, and also at
// PRMPath alone for the endpoint itself: clients look in both places.
const PRMPath = "/.well-known/oauth-protected-resource"

// mcpScopes are the scopes an MCP client needs, in a 401's challenge and in
// the metadata.
var mcpScopes = []string{store.ScopeToolsList, store.ScopeToolsCall}

// CheckPublicURL validates a public URL for Options.PublicURL: http or
// https, a host, nothing after it but an optional "/". It returns it
// without the trailing slash, its host lower-cased.
func CheckPublicURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", fmt.Errorf("public URL %q: %w", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("public URL %q: want http:// or https://", raw)
	case u.Host == "" || u.User != nil:
		return "", fmt.Errorf("public URL %q: want scheme://host[:port] and nothing else", raw)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.ForceQuery:
		return "", fmt.Errorf("public URL %q: no path, query or fragment (the gateway serves %s at the root)", raw, MCPPath)
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}

// ErrPlainHTTP is returned by PublicURLWarning for a public URL that is
// plain http on a host that is not loopback.
var ErrPlainHTTP = errors.New("OAuth clients refuse plain http except on loopback: sign-in will fail; use https (--tls-cert-file, or a reverse proxy's https URL)")

// PublicURLWarning checks a public URL that CheckPublicURL accepted for
// what starts but does not work: plain http on a host other than
// localhost or a loopback address, where the MCP clients' OAuth
// (following OAuth 2.1 and RFC 8252) refuses to sign in. It returns nil
// or an error wrapping ErrPlainHTTP, for the caller to log as a warning:
// a gateway used with personal tokens only, on a closed network, may mean
// it.
func PublicURLWarning(publicURL string) error {
	u, err := url.Parse(publicURL)
	if err != nil || u.Scheme != "http" {
		return nil
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("public URL %s: %w", publicURL, ErrPlainHTTP)
}

// PublicBase is scheme://host of the URL the client of r used: publicURL
// (Options.PublicURL) when set, or else the request's own Host, https when
// it came over TLS.
func PublicBase(publicURL string, r *http.Request) string {
	if publicURL != "" {
		return publicURL
	}
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

func (g *Gateway) publicBase(r *http.Request) string { return PublicBase(g.opts.PublicURL, r) }

// IsResource reports whether resource (an RFC 8707 resource indicator)
// names an MCP endpoint of a gateway with this public URL, as the client
// of r sees it: the plain endpoint, an entity's, or the gateway's origin,
// which the metadata at PRMPath names (RFC 9728 section 3.3) and which
// stands for the plain endpoint. The scheme and host compare without case;
// the path exactly, so ".../mcp/" names no endpoint.
func IsResource(publicURL string, r *http.Request, resource string) bool {
	_, ok := endpointOf(PublicBase(publicURL, r), resource)
	return ok
}

// endpointOf is the path of the MCP endpoint that resource names on a
// gateway at base (scheme://host): MCPPath for the origin itself.
func endpointOf(base, resource string) (string, bool) {
	res, ok1 := oauth.NormalizeResource(resource)
	b, ok2 := oauth.NormalizeResource(base)
	if !ok1 || !ok2 {
		return "", false
	}
	rest, ok := strings.CutPrefix(res, b)
	switch {
	case !ok:
		return "", false
	case rest == "" || rest == "/": // the same URL for http (RFC 3986 section 6.2.3)
		return MCPPath, true
	case rest == MCPPath || strings.HasPrefix(rest, MCPPath+"/"):
		return resourcePath(rest)
	}
	return "", false
}

// forResource reports whether a token bound to audience may be used on r:
// the audience must name r's own endpoint (RFC 8707), so that a token a
// client got for one resource is refused by every other. A trailing "/"
// of the audience is forgiven here, as tokens minted before the token
// endpoint refused it have one.
func (g *Gateway) forResource(r *http.Request, audience string) bool {
	path, ok := resourcePath(r.URL.Path)
	if !ok || r.URL.Path == "" {
		return false
	}
	aud, ok := endpointOf(g.publicBase(r), strings.TrimSuffix(audience, "/"))
	return ok && aud == path
}

// resourcePath is the MCP endpoint path that path names (the metadata's
// suffix, or a request's own path), and whether it names one.
func resourcePath(path string) (string, bool) {
	if path == "" || path == MCPPath {
		return MCPPath, true
	}
	rest, ok := strings.CutPrefix(path, MCPPath+"/")
	if !ok {
		return "", false
	}
	entityType, entityID, ok := strings.Cut(rest, "/")
	return path, ok && contract.ValidLevel(entityType) && contract.ValidLevel(entityID)
}

// serveWellKnown answers every /.well-known/ path: PRMPath[/<endpoint
// path>] with the endpoint's metadata, through the go-sdk's handler (CORS
// for browser clients, GET only); anything else with a JSON 404, never a
// redirect or a page, which clients would take for metadata.
func (g *Gateway) serveWellKnown(w http.ResponseWriter, r *http.Request) {
	// The Host check of every endpoint (DNS rebinding), which also keeps a
	// foreign Host out of the metadata's resource; any Origin may read
	// public metadata (CORS).
	if !g.hostAllowed(r.Host) {
		g.refuse(w, r, http.StatusForbidden, "forbidden_host", "Host "+quote(r.Host)+" is not served here")
		return
	}
	if g.opts.AuthServer != nil && oauth.Handles(r.URL.Path) {
		g.opts.AuthServer.ServeHTTP(w, r)
		return
	}
	suffix, isPRM := strings.CutPrefix(r.URL.Path, PRMPath)
	path, ok := resourcePath(suffix)
	if !isPRM || !ok {
		writeError(w, http.StatusNotFound, "not_found", "no protected resource at "+r.URL.Path)
		return
	}
	// The metadata at PRMPath itself is the origin's (RFC 9728 section
	// 3.3: the resource is the URL the well-known path was inserted
	// into); a token asked for it serves the plain endpoint.
	resource := g.publicBase(r) + path
	if suffix == "" {
		resource = g.publicBase(r)
	}
	meta := &oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		ScopesSupported:        mcpScopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           g.opts.ServerName,
	}
	if g.opts.AuthServer != nil {
		meta.AuthorizationServers = []string{g.publicBase(r)}
	}
	auth.ProtectedResourceMetadataHandler(meta).ServeHTTP(w, r)
}

// challenge is the WWW-Authenticate value of a 401: on an MCP endpoint it
// points the client to the endpoint's metadata and says the scopes it
// needs (RFC 9728 section 5.1), so that OAuth clients can find their way.
// A token that was presented and refused adds error="invalid_token" (RFC
// 6750 section 3.1), telling a client to refresh or sign in again.
func (g *Gateway) challenge(r *http.Request, invalidToken bool) string {
	c := `Bearer realm="toolbus"`
	if invalidToken {
		c += `, error="invalid_token"`
	}
	path, ok := resourcePath(r.URL.Path)
	if !ok || r.URL.Path == "" {
		return c
	}
	return fmt.Sprintf(`%s, resource_metadata=%q, scope=%q`, c, g.publicBase(r)+PRMPath+path, strings.Join(mcpScopes, " "))
}

// insufficientScope is the WWW-Authenticate value of a 403 for a token
// without scope: the scopes the token has and the one it lacks, and the
// endpoint's metadata (RFC 6750 section 3.1, RFC 9728 section 5.1).
func (g *Gateway) insufficientScope(r *http.Request, tok store.Token, need string) string {
	scopes := append(slices.Clone(tok.Scopes), need)
	path, _ := resourcePath(r.URL.Path)
	return fmt.Sprintf(`Bearer realm="toolbus", error="insufficient_scope", scope=%q, resource_metadata=%q`,
		strings.Join(scopes, " "), g.publicBase(r)+PRMPath+path)
}
