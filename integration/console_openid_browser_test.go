package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestConsoleBrowserOpenIDSignIn: with an OpenID provider configured
// (zitadel/oidc's example provider, a real one) the console's sign-in page
// offers it; alice, in the group --oidc-admin-groups names, signs in there
// and lands on the overview as her toolbus user; bob, in no admin group,
// is refused with a page that says why (though a store admin has his
// name), and gets no console page. Both are audited.
func TestConsoleBrowserOpenIDSignIn(t *testing.T) {
	op, issuer := startOpenIDProvider(t)
	srv := startServer(t, server.Config{
		OAuth: server.OAuthConfig{OIDC: oauth.OIDCOptions{Issuer: issuer, ClientID: "toolbus-console", ClientSecret: "toolbus-console-secret",
			UserClaim: "email", UserPrefix: "sso-"}},
		Console: server.ConsoleConfig{OpenIDAdminGroups: []string{"staff"}},
	})
	base := "http://" + srv.HTTPAddr().String()
	storage.RegisterClients(storage.WebClient("toolbus-console", "toolbus-console-secret", base+oauth.CallbackPath))
	op.Start()
	idOf := func(email string) string {
		sum := sha256.Sum256([]byte("sso-" + email))
		return "sso-" + strings.NewReplacer("@", "_", ".", "_").Replace(email) + "-" + hex.EncodeToString(sum[:])[:16]
	}
	alice, bob := idOf("alice@example.com"), idOf("bob@example.com")
	// A store admin of bob's very name does not make bob an admin at the
	// provider: only the groups do (which names a provider hands out is
	// its business).
	consoleUser(t, srv, bob, "bob-store-password-1", true)

	// signInAt signs user in at the provider from a new browser and
	// returns its context and its watch.
	signInAt := func(user, password string) (context.Context, *browserWatch) {
		t.Helper()
		bctx := testenv.Browser(t, 60*time.Second) // a browser of its own: no provider session of another user
		w := watchBrowser(t, bctx)
		within(t, bctx, domWait, user+" at the provider",
			chromedp.Navigate(base+"/console/sign-in"),
			chromedp.Click(css(`#openid-sign-in`)),
			// The provider's login page (the console's own sign-in page has
			// a #username too).
			chromedp.WaitVisible(css(`form[action="/login/username"] #username`)),
			chromedp.SendKeys(css(`form[action="/login/username"] #username`), user),
			chromedp.SendKeys(css(`form[action="/login/username"] #password`), password),
			chromedp.Submit(css(`form[action="/login/username"] #password`)),
			chromedp.WaitVisible(css(`main h1`)),
		)
		return bctx, w
	}
	text := func(bctx context.Context, sel string) string {
		t.Helper()
		within(t, bctx, domWait, sel, chromedp.WaitVisible(css(sel)))
		return get(t, bctx, sel, chromedp.Text(css(sel)))
	}

	actx, w := signInAt("alice", "alice-at-the-idp")
	text(actx, `#agents-online`) // the overview, after the page that moves on
	if got := text(actx, `form.signout span`); got != alice {
		t.Fatalf("signed in as %q, want %s", got, alice)
	}
	w.check(t)

	bctx, wb := signInAt("bob", "bob-at-the-idp")
	if got := text(bctx, `main h1`); got != "Not an admin" {
		t.Fatalf("bob's page: %q", got)
	}
	if msg := text(bctx, `.message`); !strings.Contains(msg, "no admin group") {
		t.Fatalf("bob's refusal says %q", msg)
	}
	within(t, bctx, domWait, "no console page for bob",
		chromedp.Navigate(base+"/console/agents"),
		chromedp.WaitVisible(css(`#password`)))
	wb.check(t)

	ctx := testCtx(t, 10*time.Second)
	want := map[string]string{alice: "ok", bob: "refused"}
	testenv.Poll(t, 10*time.Second, "the sign-ins audited", func() bool {
		evs, _, err := srv.Store().QueryAudit(ctx, store.AuditQuery{Kind: store.AuditConsole})
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, e := range evs {
			if e.Action != "sign_in" || e.Target != "openid" {
				continue
			}
			for u, outcome := range want {
				if strings.HasPrefix(e.UserID, u) && e.Outcome == outcome {
					found++
				}
			}
		}
		return found == len(want)
	})
}
