package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/singleflight"

	"github.com/toolbus/toolbus/store"
)

// Limits of a form posted to the authorization, token or revocation
// endpoint, of a registration's body and of a client_id URL. What a client
// may register is bounded by clientLimits.
const (
	maxFormBytes         = 64 << 10
	maxRegistrationBytes = 64 << 10
	maxURILen            = 2048
)

// clientLimits bound what a registration or a metadata document leaves in
// the store (Options.MaxRedirectURIs, MaxRedirectURILen, MaxClientNameLen).
type clientLimits struct {
	uris, uriLen, nameLen int
}

// errClient is wrapped by the errors of a client's metadata: a
// registration's invalid_client_metadata or invalid_redirect_uri, a
// Client ID Metadata Document that cannot be used.
var errClient = errors.New("invalid client metadata")

// errRedirectURI is wrapped by the errors about redirect URIs (RFC 7591's
// invalid_redirect_uri); it wraps errClient.
var errRedirectURI = fmt.Errorf("%w: redirect URIs", errClient)

// loopbackHost reports whether host (no port) is a loopback name or
// address, where RFC 8252 lets a native app's redirect take any port.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkRedirectURI says why uri cannot be a redirect URI: https, http on a
// loopback host (RFC 8252 section 7.3), or a private-use scheme of a
// native app (section 7.1); never a fragment, credentials or a scheme a
// browser would run.
func checkRedirectURI(uri string, maxLen int) error {
	if len(uri) > maxLen {
		return fmt.Errorf("%w: redirect URI %.60q: over %d bytes", errRedirectURI, uri, maxLen)
	}
	if strings.ContainsAny(uri, " \t\r\n") {
		return fmt.Errorf("%w: redirect URI %.60q: holds white space", errRedirectURI, uri)
	}
	u, err := url.Parse(uri)
	switch {
	case err != nil || !u.IsAbs():
		return fmt.Errorf("%w: redirect URI %.60q: not an absolute URI", errRedirectURI, uri)
	case u.Fragment != "" || strings.Contains(uri, "#"):
		return fmt.Errorf("%w: redirect URI %.60q: has a fragment", errRedirectURI, uri)
	case u.User != nil:
		return fmt.Errorf("%w: redirect URI %.60q: has credentials", errRedirectURI, uri)
	}
	switch u.Scheme {
	case "https":
		if u.Host == "" {
			return fmt.Errorf("%w: redirect URI %.60q: no host", errRedirectURI, uri)
		}
	case "http":
		if !loopbackHost(u.Hostname()) {
			return fmt.Errorf("%w: redirect URI %.60q: http only on a loopback address (use https)", errRedirectURI, uri)
		}
	case "javascript", "data", "file", "vbscript", "blob", "about", "ws", "wss":
		return fmt.Errorf("%w: redirect URI %.60q: scheme %s is not allowed", errRedirectURI, uri, u.Scheme)
	}
	return nil
}

// redirectAllowed reports whether uri may be used with a client that
// registered registered: the same string, or for a loopback http URI the
// same but for the port (RFC 8252 section 7.3: the port is chosen when the
// app starts).
func redirectAllowed(registered []string, uri string) bool {
	if slices.Contains(registered, uri) {
		return true
	}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "http" || !loopbackHost(u.Hostname()) || u.Fragment != "" || u.User != nil {
		return false
	}
	for _, reg := range registered {
		r, err := url.Parse(reg)
		if err == nil && r.Scheme == "http" && r.Hostname() == u.Hostname() && r.EscapedPath() == u.EscapedPath() && r.RawQuery == u.RawQuery {
			return true
		}
	}
	return false
}

// checkName says why name cannot be shown as a client's name.
func checkName(name string, maxLen int) error {
	if len(name) > maxLen || !utf8.ValidString(name) || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: client_name: at most %d bytes of printable text", errClient, maxLen)
	}
	return nil
}

// checkMetadata validates what a registration or a metadata document says
// of the client; it returns whether the client is confidential.
func checkMetadata(m *oauthex.ClientRegistrationMetadata, lim clientLimits, allowSecret bool) (confidential bool, err error) {
	if len(m.RedirectURIs) == 0 || len(m.RedirectURIs) > lim.uris {
		return false, fmt.Errorf("%w: want 1 to %d", errRedirectURI, lim.uris)
	}
	for _, u := range m.RedirectURIs {
		if err := checkRedirectURI(u, lim.uriLen); err != nil {
			return false, err
		}
	}
	if err := checkName(m.ClientName, lim.nameLen); err != nil {
		return false, err
	}
	for _, g := range m.GrantTypes {
		if g != "authorization_code" && g != "refresh_token" {
			return false, fmt.Errorf("%w: grant type %q is not supported (authorization_code, refresh_token)", errClient, g)
		}
	}
	for _, rt := range m.ResponseTypes {
		if rt != "code" {
			return false, fmt.Errorf("%w: response type %q is not supported (code)", errClient, rt)
		}
	}
	switch m.TokenEndpointAuthMethod {
	case "none":
		return false, nil
	case "", "client_secret_basic", "client_secret_post":
		if !allowSecret {
			// A document anyone can read cannot hold a secret.
			return false, fmt.Errorf("%w: token_endpoint_auth_method %q: a metadata document's client must use none", errClient, m.TokenEndpointAuthMethod)
		}
		return true, nil
	}
	return false, fmt.Errorf("%w: token_endpoint_auth_method %q is not supported (%s)", errClient, m.TokenEndpointAuthMethod, strings.Join(authMethods, ", "))
}

// register is RFC 7591's endpoint: anyone may register a client, as MCP
// clients do on their first use of a server. Rate-limited per address.
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	if !s.allowIP(w, r, "register") {
		return
	}
	refuse := func(code string, err error) {
		s.audit(r, store.AuditEvent{Action: "register", Outcome: "refused", Reason: err.Error(), Status: http.StatusBadRequest})
		writeJSON(w, http.StatusBadRequest, oauthError{Code: code, Description: err.Error()})
	}
	var m oauthex.ClientRegistrationMetadata
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRegistrationBytes))
	if err := dec.Decode(&m); err != nil {
		refuse("invalid_client_metadata", fmt.Errorf("%w: body is not a JSON object of client metadata: %w", errClient, err))
		return
	}
	if m.TokenEndpointAuthMethod == "" {
		m.TokenEndpointAuthMethod = "client_secret_basic" // RFC 7591's default
	}
	confidential, err := checkMetadata(&m, s.meta.limits, true)
	if err != nil {
		code := "invalid_client_metadata"
		if errors.Is(err, errRedirectURI) {
			code = "invalid_redirect_uri"
		}
		refuse(code, err)
		return
	}
	if len(m.GrantTypes) == 0 {
		m.GrantTypes = []string{"authorization_code", "refresh_token"}
	}
	if len(m.ResponseTypes) == 0 {
		m.ResponseTypes = []string{"code"}
	}
	c, secret, wait, err := s.unused.register(r.Context(), s.opts.Store, s.clientAddr(r), m.ClientName, m.RedirectURIs, confidential)
	if errors.Is(err, errSourceUnused) {
		secs := retryAfter(w, wait)
		s.audit(r, store.AuditEvent{Action: "register", Outcome: "refused", Reason: err.Error(), Status: http.StatusTooManyRequests})
		writeJSON(w, http.StatusTooManyRequests, oauthError{Code: "slow_down",
			Description: fmt.Sprintf("too many clients registered from this address and not yet used; retry in %d s", secs)})
		return
	}
	if errors.Is(err, errTooManyUnused) {
		secs := retryAfter(w, wait)
		s.audit(r, store.AuditEvent{Action: "register", Outcome: "refused", Reason: err.Error(), Status: http.StatusServiceUnavailable})
		writeJSON(w, http.StatusServiceUnavailable, oauthError{Code: "temporarily_unavailable",
			Description: fmt.Sprintf("too many clients registered and not yet used; retry in %d s", secs)})
		return
	}
	if err != nil {
		s.log.WithError(err).Error("register client")
		writeJSON(w, http.StatusServiceUnavailable, errUnavailable)
		return
	}
	s.audit(r, store.AuditEvent{Action: "register", ClientID: c.ID, Target: m.ClientName})
	writeJSON(w, http.StatusCreated, registration{ClientRegistrationResponse: &oauthex.ClientRegistrationResponse{
		ClientRegistrationMetadata: oauthex.ClientRegistrationMetadata{
			RedirectURIs: m.RedirectURIs, TokenEndpointAuthMethod: m.TokenEndpointAuthMethod,
			GrantTypes: m.GrantTypes, ResponseTypes: m.ResponseTypes, ClientName: m.ClientName,
			ClientURI: m.ClientURI, Scope: m.Scope, SoftwareID: m.SoftwareID, SoftwareVersion: m.SoftwareVersion,
		},
		ClientID:         c.ID,
		ClientSecret:     secret,
		ClientIDIssuedAt: c.Created,
	}})
}

// registration is the answer to a registration. RFC 7591 wants
// client_secret_expires_at with every secret (0: it never expires), which
// the go-sdk's type leaves out when zero.
type registration struct {
	*oauthex.ClientRegistrationResponse
}

func (r registration) MarshalJSON() ([]byte, error) {
	b, err := r.ClientRegistrationResponse.MarshalJSON()
	if err != nil || r.ClientSecret == "" {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["client_secret_expires_at"] = 0
	return json.Marshal(m)
}

// client returns the client client_id names: a registered one, or the
// Client ID Metadata Document at that URL.
func (s *Server) client(ctx context.Context, id string) (store.OAuthClient, error) {
	if isMetadataURL(id) {
		return s.meta.fetch(ctx, id)
	}
	return s.opts.Store.OAuthClient(ctx, id)
}

// isMetadataURL reports whether a client_id is a URL (a Client ID Metadata
// Document) rather than an ID this server issued.
func isMetadataURL(id string) bool {
	return strings.HasPrefix(id, "https://") || strings.HasPrefix(id, "http://")
}

// ClientMetadataOptions bounds the fetch of Client ID Metadata Documents.
// The zero value is the safe default.
type ClientMetadataOptions struct {
	// AllowPrivate lets documents be fetched from loopback, private,
	// link-local and other non-public addresses, over http too: for tests
	// and closed networks. Off, a client_id cannot make the server reach
	// inside its own network.
	AllowPrivate bool
	// Timeout bounds one fetch; 0 means 5s.
	Timeout time.Duration
	// MaxBytes bounds a document; 0 means 5 KiB.
	MaxBytes int64
	// CacheTTL is how long a fetched document is used when its answer's
	// Cache-Control says nothing of it; 0 means 5 minutes. What it says
	// (max-age, s-maxage; no-store, no-cache or private as none at all) is
	// held within MinClientMetadataTTL and MaxClientMetadataTTL.
	CacheTTL time.Duration
	// Transport is the HTTP transport of fetches (tests pass one that
	// trusts their certificate); nil means one that dials only the
	// addresses AllowPrivate allows. Its dialing is then the caller's to
	// restrict.
	Transport http.RoundTripper
}

// metaFetcher fetches and caches Client ID Metadata Documents.
type metaFetcher struct {
	opts   ClientMetadataOptions
	limits clientLimits
	log    *logrus.Entry
	client *http.Client
	// A plain LRU with a fetch time per entry: expirable.LRU would start
	// a goroutine that nothing can stop.
	cache  *lru.Cache[string, fetchedClient]
	flight singleflight.Group
	slots  chan struct{} // maxFetches
	now    func() time.Time
}

type fetchedClient struct {
	client  store.OAuthClient
	err     error // a failed fetch, remembered for failedFetchTTL
	fetched time.Time
	ttl     time.Duration // how long client is used (cacheTTL)
}

// The bounds of how long a Client ID Metadata Document is used, whatever
// its answer's Cache-Control says. The least keeps one sign-in (the page,
// then the consent posted from it) on one fetch, and a client_id that
// forbids caching from making the server fetch it at each request; the
// most lets a client's change of its redirect URIs reach the server within
// a day.
const (
	MinClientMetadataTTL = 30 * time.Second
	MaxClientMetadataTTL = 24 * time.Hour
)

// cacheTTL is how long to use a document whose answer has these headers:
// Cache-Control's s-maxage or max-age (RFC 9111 section 5.2.2; the server
// is a cache shared by all its users, so s-maxage first and private as
// no-store), else def, held within MinClientMetadataTTL and
// MaxClientMetadataTTL.
func cacheTTL(h http.Header, def time.Duration) time.Duration {
	ttl, maxAge, sMaxAge := def, -1, -1
	for _, v := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
			secs, err := strconv.Atoi(strings.Trim(arg, `"`))
			switch name = strings.ToLower(name); {
			case name == "no-store" || name == "no-cache" || name == "private":
				return MinClientMetadataTTL
			case name == "max-age" && err == nil && secs >= 0:
				maxAge = secs
			case name == "s-maxage" && err == nil && secs >= 0:
				sMaxAge = secs
			}
		}
	}
	switch {
	case sMaxAge >= 0:
		ttl = time.Duration(sMaxAge) * time.Second
	case maxAge >= 0:
		ttl = time.Duration(maxAge) * time.Second
	}
	return min(max(ttl, MinClientMetadataTTL), MaxClientMetadataTTL)
}

// Bounds of the fetches a stranger's client_id can make the server do.
const (
	// failedFetchTTL is how long a failed fetch is answered from memory.
	failedFetchTTL = time.Minute
	// maxFetches bounds the fetches under way at once; more are refused.
	maxFetches = 8
)

// errBusy is a fetch refused because maxFetches are under way.
var errBusy = fmt.Errorf("%w: too many client metadata documents are being fetched; try again", errClient)

func newMetaFetcher(opts ClientMetadataOptions, limits clientLimits, log *logrus.Entry) *metaFetcher {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 5 << 10
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 5 * time.Minute
	}
	rt := opts.Transport
	if rt == nil {
		allowPrivate := opts.AllowPrivate
		d := &net.Dialer{Timeout: opts.Timeout, Control: func(_, address string, _ syscall.RawConn) error {
			return checkDialAddr(address, allowPrivate)
		}}
		rt = &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: opts.Timeout, MaxIdleConns: 8, IdleConnTimeout: 30 * time.Second}
	}
	cache, _ := lru.New[string, fetchedClient](1000) // size > 0 cannot fail
	return &metaFetcher{
		opts:   opts,
		limits: limits,
		log:    log,
		client: &http.Client{Transport: rt, Timeout: opts.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				// The document must be at the client_id itself.
				return errNoRedirect
			}},
		cache: cache,
		slots: make(chan struct{}, maxFetches),
		now:   time.Now,
	}
}

// checkDialAddr refuses a non-public address unless allowPrivate. It runs
// on the address actually dialled, after name resolution, so a name that
// resolves inside the network is caught too.
func checkDialAddr(address string, allowPrivate bool) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("client metadata: dial %s: %w", address, err)
	}
	ip := ap.Addr().Unmap()
	if allowPrivate {
		return nil
	}
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() ||
		ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || !ip.IsGlobalUnicast() ||
		slices.ContainsFunc(notPublic, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return fmt.Errorf("client metadata: %s: %w", ip, errNotPublic)
	}
	return nil
}

// Why a fetch failed, as the user may read it (the network error itself,
// with the server's resolver and addresses, goes to the log only).
var (
	errNoRedirect = errors.New("redirects are not followed")
	errNotPublic  = errors.New("not a public address")
)

// notPublic are the special-purpose ranges (IANA's registries) that Go's
// predicates above do not cover, among them the IPv6 ranges that carry an
// IPv4 address inside: through NAT64, 6to4 or Teredo they reach the
// private network too.
var notPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"100.64.0.0/10",   // shared address space (CGNAT)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved
		"64:ff9b::/96",    // NAT64
		"64:ff9b:1::/48",  // local-use NAT64
		"2001::/32",       // Teredo
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// checkMetadataURL says why id cannot be a Client ID Metadata Document's
// URL: https with a path, no fragment, credentials or dot segments.
func (f *metaFetcher) checkMetadataURL(id string) error {
	u, err := url.Parse(id)
	switch {
	case err != nil || len(id) > maxURILen:
		return fmt.Errorf("%w: client_id %.60q is not a URL", errClient, id)
	case u.Scheme != "https" && !(u.Scheme == "http" && f.opts.AllowPrivate):
		return fmt.Errorf("%w: client_id %.60q: a metadata document must be served over https", errClient, id)
	case u.Host == "" || u.User != nil || u.Fragment != "" || u.Path == "" || u.Path == "/":
		return fmt.Errorf("%w: client_id %.60q: want https://host/path, no credentials or fragment", errClient, id)
	case slices.Contains(strings.Split(u.Path, "/"), ".") || slices.Contains(strings.Split(u.Path, "/"), ".."):
		return fmt.Errorf("%w: client_id %.60q: dot segments in the path", errClient, id)
	}
	return nil
}

// cached returns what the cache knows of id: a client, or a failure.
func (f *metaFetcher) cached(id string) (fetchedClient, bool) {
	c, ok := f.cache.Get(id)
	switch {
	case !ok:
		return fetchedClient{}, false
	case c.err != nil:
		return c, f.now().Sub(c.fetched) < failedFetchTTL
	default:
		return c, f.now().Sub(c.fetched) < c.ttl
	}
}

// fetch returns the client a metadata document describes: from the cache
// while it is fresh (a failure for a minute), else fetched, one fetch per
// URL however many requests want it, at most maxFetches at once.
func (f *metaFetcher) fetch(ctx context.Context, id string) (store.OAuthClient, error) {
	if c, ok := f.cached(id); ok {
		return c.client, c.err
	}
	if err := f.checkMetadataURL(id); err != nil {
		return store.OAuthClient{}, err
	}
	v, err, _ := f.flight.Do(id, func() (any, error) {
		select {
		case f.slots <- struct{}{}:
			defer func() { <-f.slots }()
		default:
			return store.OAuthClient{}, errBusy
		}
		// Not the caller's ctx: the fetch serves every caller waiting on
		// it, and one that gives up must not fail the others.
		c, ttl, err := f.get(context.WithoutCancel(ctx), id)
		if errors.Is(err, errClient) {
			f.cache.Add(id, fetchedClient{err: err, fetched: f.now()})
		} else if err == nil {
			f.cache.Add(id, fetchedClient{client: c, fetched: f.now(), ttl: ttl})
		}
		return c, err
	})
	return v.(store.OAuthClient), err
}

// get fetches and checks the document at id, and says how long to use it
// (cacheTTL).
func (f *metaFetcher) get(ctx context.Context, id string) (store.OAuthClient, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: client_id %.60q: %w", errClient, id, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		reason := "cannot be reached"
		var ne net.Error
		switch {
		case errors.Is(err, errNoRedirect):
			reason = errNoRedirect.Error()
		case errors.Is(err, errNotPublic):
			reason = "is not on a public address"
		case errors.As(err, &ne) && ne.Timeout():
			reason = "did not answer in time"
		}
		f.log.WithError(err).WithField("client_id", id).Info("client metadata fetch failed")
		return store.OAuthClient{}, 0, fmt.Errorf("%w: fetch %s: %s", errClient, id, reason)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: fetch %s: HTTP %d", errClient, id, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.opts.MaxBytes+1))
	if err != nil {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: fetch %s: %w", errClient, id, err)
	}
	if int64(len(body)) > f.opts.MaxBytes {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: %s: document over %d bytes", errClient, id, f.opts.MaxBytes)
	}
	var doc struct {
		oauthex.ClientRegistrationMetadata
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: %s: not JSON client metadata: %w", errClient, id, err)
	}
	if doc.ClientID != id {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: %s: the document's client_id is %.60q, not its own URL", errClient, id, doc.ClientID)
	}
	if doc.ClientSecret != "" {
		return store.OAuthClient{}, 0, fmt.Errorf("%w: %s: a metadata document cannot hold a client_secret", errClient, id)
	}
	if doc.TokenEndpointAuthMethod == "" {
		doc.TokenEndpointAuthMethod = "none" // a public document's client has no secret
	}
	if _, err := checkMetadata(&doc.ClientRegistrationMetadata, f.limits, false); err != nil {
		return store.OAuthClient{}, 0, fmt.Errorf("%s: %w", id, err)
	}
	return store.OAuthClient{ID: id, Name: doc.ClientName, RedirectURIs: doc.RedirectURIs, Created: time.Now()},
		cacheTTL(resp.Header, f.opts.CacheTTL), nil
}
