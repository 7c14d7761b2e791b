package console

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/store"
)

// OpenID is the console's sign-in at the gateway's OpenID provider (the
// one the OAuth sign-in uses, serve --oidc-issuer).
type OpenID struct {
	// Issuer is the provider, named on the sign-in page.
	Issuer string
	// Start sends the browser to the provider; the provider's answer
	// comes back to SignedIn (oauth.Server.StartConsoleSignIn).
	Start func(w http.ResponseWriter, r *http.Request)
	// AdminGroups: members of any of these groups (the provider's groups
	// claim) get the console (serve --oidc-admin-groups); nil: nobody
	// signs in there.
	AdminGroups []string
}

// origin is the scheme://host[:port] of an issuer URL; "" if it has none.
func origin(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil || u.Scheme == "" || u.Host == "" || strings.ContainsAny(u.Host, " ;'") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// startOpenID sends the browser to the provider; the sign-in limit per
// address applies, as to passwords.
func (c *Console) startOpenID(w http.ResponseWriter, r *http.Request) {
	if c.opts.OpenID == nil {
		c.render(w, http.StatusNotFound, "refused", pageData{Title: "Not found", Message: "No identity provider is configured for the console."})
		return
	}
	if ok, wait := c.perIP.Allow(c.clientAddr(r)); !ok {
		c.tooMany(w, r, "", wait)
		return
	}
	c.opts.OpenID.Start(w, r)
}

// SignedIn ends a sign-in at the OpenID provider: user and groups come
// from its verified answer (package oauth). A member of an admin group
// gets a session; any other is refused with a page that says why.
func (c *Console) SignedIn(w http.ResponseWriter, r *http.Request, user string, groups []string) {
	securityHeaders(w.Header())
	// Groups only: a store user of the same name is not enough, since
	// which names a provider lets its users take is the provider's
	// business (a self-chosen preferred_username could name a local
	// admin).
	admin := c.opts.OpenID != nil && slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(c.opts.OpenID.AdminGroups, g) })
	if !admin {
		c.audit(r, store.AuditEvent{Action: "sign_in", UserID: user, Outcome: "refused", Target: "openid",
			Reason: "not an admin (groups: " + strings.Join(groups, ", ") + ")", Status: http.StatusForbidden})
		c.render(w, http.StatusForbidden, "refused", pageData{Title: "Not an admin",
			Message: "The identity provider signed you in as " + user + ", who is in no admin group of the console. An operator maps groups to the console with --oidc-admin-groups."})
		return
	}
	ss := c.sessions.add(user, "", true, time.Now())
	c.setCookie(w, ss.id, int(c.opts.MaxAge/time.Second))
	c.audit(r, store.AuditEvent{Action: "sign_in", UserID: user, Target: "openid"})
	// The provider's redirect made this a cross-site navigation, on which
	// the browser does not send a SameSite=Strict cookie, nor on a
	// redirect from it: a page of this origin moves on, and its own
	// navigation is same-site.
	c.render(w, http.StatusOK, "continue", pageData{Title: "Signed in", Done: "Signed in as " + user + "."})
}
