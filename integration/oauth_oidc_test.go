package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// groupStorage is the zitadel example provider's storage with a groups
// claim in its userinfo answers, as company providers send one.
type groupStorage struct {
	*storage.Storage
	groups map[string][]string // subject -> groups
}

func (s *groupStorage) SetUserinfoFromToken(ctx context.Context, ui *zoidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, ui, tokenID, subject, origin); err != nil {
		return err
	}
	ui.AppendClaims("groups", s.groups[subject])
	return nil
}

// startOpenIDProvider runs zitadel/oidc's example OpenID provider on a
// loopback port with two users: alice (group mcp-users) and bob (no
// group). It returns the provider and its issuer URL; register clients
// with storage.RegisterClients before its first request.
func startOpenIDProvider(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	users := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(users, []byte(`{
		"u-alice": {"ID": "u-alice", "Username": "alice", "Password": "alice-at-the-idp", "Email": "alice@example.com", "EmailVerified": true, "PreferredLanguage": "en"},
		"u-bob": {"ID": "u-bob", "Username": "bob", "Password": "bob-at-the-idp", "Email": "bob@example.com", "EmailVerified": true, "PreferredLanguage": "en"}
	}`), 0o600); err != nil {
		t.Fatal(err)
	}
	us, err := storage.StoreFromFile(users)
	if err != nil {
		t.Fatal(err)
	}
	op := httptest.NewUnstartedServer(nil)
	issuer := "http://" + op.Listener.Addr().String() + "/"
	st := &groupStorage{Storage: storage.NewStorage(us), groups: map[string][]string{"u-alice": {"mcp-users", "staff"}}}
	op.Config.Handler = exampleop.SetupServer(issuer, st, nil, false)
	t.Cleanup(op.Close)
	return op, issuer
}

// idpSignIn returns an AuthorizationCodeFetcher that plays user in
// Chromium: the toolbus consent page, then the provider's login page; the
// provider sends the browser back to toolbus, and toolbus to redirect,
// where the code is taken.
func idpSignIn(t *testing.T, redirect *redirectCatcher, user, password string) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		bctx := testenv.Browser(t, 60*time.Second) // a browser of its own: no provider session left from another user
		if err := chromedp.Do(bctx,
			chromedp.Navigate(args.URL),
			chromedp.WaitVisible(chromedp.CSS(`button[value=allow]`)),
		); err != nil {
			return nil, err
		}
		if text := pageText(t, bctx); !strings.Contains(text, "You will sign in at") {
			t.Errorf("the consent page does not name the provider:\n%s", text)
		}
		if err := chromedp.Do(bctx,
			chromedp.Click(chromedp.CSS(`button[value=allow]`)),
			chromedp.WaitVisible(chromedp.CSS(`#username`)), // the provider's login page
			chromedp.SendKeys(chromedp.CSS(`#username`), user),
			chromedp.SendKeys(chromedp.CSS(`#password`), password),
			chromedp.Submit(chromedp.CSS(`#password`)),
		); err != nil {
			return nil, err
		}
		select {
		case q := <-redirect.got:
			if e := q.Get("error"); e != "" {
				return nil, errors.New(e + ": " + q.Get("error_description"))
			}
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// redirectCatcher is a client's loopback redirect URI: it hands each
// redirect's query to got.
type redirectCatcher struct {
	srv *httptest.Server
	got chan url.Values
}

func (c *redirectCatcher) url() string { return c.srv.URL + "/callback" }

func newRedirectCatcher(t *testing.T) *redirectCatcher {
	t.Helper()
	c := &redirectCatcher{got: make(chan url.Values, 4)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r) // the browser's /favicon.ico
			return
		}
		c.got <- r.URL.Query()
		_, _ = w.Write([]byte("Signed in."))
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// TestOAuthOIDCProvider: with --oidc-issuer the sign-in page hands off to
// a real OpenID provider (zitadel/oidc's example provider) with PKCE; its
// email claim names the toolbus user (after the prefix sso-), and its
// groups claim bounds the scopes. alice (group mcp-users) gets a token and
// calls tools as sso-alice_example_com-<hash>; bob, in no allowed group, is refused,
// audited; a consent posted by an attacker for alice's browser to finish
// at the provider is refused at the callback.
func TestOAuthOIDCProvider(t *testing.T) {
	op, issuer := startOpenIDProvider(t)
	e := startGateway(t, server.Config{OAuth: server.OAuthConfig{OIDC: oauth.OIDCOptions{
		Issuer: issuer, ClientID: "toolbus", ClientSecret: "toolbus-secret",
		UserClaim: "email", UserPrefix: "sso-", GroupScopes: map[string][]string{"mcp-users": {store.ScopeToolsList, store.ScopeToolsCall}},
	}}})
	storage.RegisterClients(storage.WebClient("toolbus", "toolbus-secret", e.base+oauth.CallbackPath))
	op.Start()

	connect := func(user, password string) (*mcp.ClientSession, error) {
		catcher := newRedirectCatcher(t)
		var refused atomic.Pointer[error]
		h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
			RedirectURL: catcher.url(),
			DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
				ClientName: "oidc test client", RedirectURIs: []string{catcher.url()}, TokenEndpointAuthMethod: "none",
			}},
			AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
				// The client asks again after a refusal: the user's
				// answer stays the same.
				if err := refused.Load(); err != nil {
					return nil, *err
				}
				res, err := idpSignIn(t, catcher, user, password)(ctx, args)
				if err != nil {
					refused.Store(&err)
				}
				return res, err
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-it-oidc", Version: "1"}, nil)
		cs, err := c.Connect(testCtx(t, 60*time.Second), &mcp.StreamableClientTransport{Endpoint: e.mcpURL(), OAuthHandler: h}, nil)
		if err == nil {
			t.Cleanup(func() { _ = cs.Close() })
		}
		return cs, err
	}

	cs, err := connect("alice", "alice-at-the-idp")
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	ctx := testCtx(t, 30*time.Second)
	// The prefixed email, made a topic level one-to-one: a hash of it
	// follows.
	sum := sha256.Sum256([]byte("sso-alice@example.com"))
	alice := "sso-alice_example_com-" + hex.EncodeToString(sum[:])[:16]
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami_agent"})
	if err != nil || !strings.HasPrefix(textOf(t, res), alice+"/") {
		t.Fatalf("the agent sees the caller as %q (%v), want %s", textOf(t, res), err, alice)
	}
	toks, err := e.srv.Store().ListTokens(ctx, alice)
	if err != nil || len(toks) != 1 || toks[0].Audience != e.mcpURL() {
		t.Fatalf("alice's tokens: %+v %v", toks, err)
	}

	if _, err := connect("bob", "bob-at-the-idp"); err == nil || !strings.Contains(err.Error(), "access_denied") {
		t.Fatalf("bob, in no allowed group: %v, want access_denied", err)
	}
	refused := waitAudit(t, e.srv.Store(), "bob's refusal", store.AuditQuery{Kind: store.AuditOAuth, Outcome: "refused"}, 1)
	if !strings.Contains(refused[len(refused)-1].Reason, "none of the groups") {
		t.Fatalf("refusal reason %q", refused[len(refused)-1].Reason)
	}

	// An attacker posts the consent for a client of theirs (no password is
	// asked in this mode) and sends the provider's link to alice: her
	// browser comes back without the cookie of the one that consented.
	reg, err := oauthex.RegisterClient(ctx, e.base+"/oauth/register", &oauthex.ClientRegistrationMetadata{
		ClientName: "attacker", RedirectURIs: []string{"https://attacker.example/cb"}, TokenEndpointAuthMethod: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {"https://attacker.example/cb"},
		"code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"},
		"action": {"allow"}, "grant_scope": {store.ScopeToolsCall}}
	resp, err := noRedirects.PostForm(e.base+"/oauth/authorize", form) // no Origin, no Sec-Fetch-Site: curl
	if err == nil || resp != nil && resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the attacker's consent post: %v %v", resp, err)
	}
	link := ""
	if resp != nil {
		link = resp.Header.Get("Location")
	} else if ue := (*url.Error)(nil); errors.As(err, &ue) {
		link = ue.URL // noRedirects reports the redirect as an error
	}
	if !strings.HasPrefix(link, issuer) {
		t.Fatalf("the attacker's link %q does not go to the provider", link)
	}
	bctx := testenv.Browser(t, 60*time.Second)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#username`)),
		chromedp.SendKeys(chromedp.CSS(`#username`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`#password`), "alice-at-the-idp"),
		chromedp.Submit(chromedp.CSS(`#password`)),
		chromedp.WaitVisible(chromedp.CSS(`p.error`)),
	); err != nil {
		t.Fatal(err)
	}
	if text := pageText(t, bctx); !strings.Contains(text, "started in another browser") {
		t.Fatalf("alice's browser shows:\n%s", text)
	}
	waitAudit(t, e.srv.Store(), "the refused callback", store.AuditQuery{Kind: store.AuditOAuth, Outcome: "refused"}, 2)
}
