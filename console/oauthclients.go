package console

import (
	"fmt"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/admin"
)

// oauthRoutes adds the OAuth clients page (this file) and the console's
// own sessions page (sessions.go).
func (c *Console) oauthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+Path+"oauth-clients", c.withSession(c.oauthClientsPage))
	mux.HandleFunc("POST "+Path+"oauth-clients/{id}/delete", c.withSession(c.oauthClientDelete))
	mux.HandleFunc("GET "+Path+"sessions", c.withSession(c.sessionsPage))
	mux.HandleFunc("POST "+Path+"sessions/{handle}/end", c.withSession(c.sessionEnd))
}

// oauthClientsData is the OAuth clients page's data.
type oauthClientsData struct {
	Clients []oauthClientRow
}

// oauthClientRow is one registered client as `toolbus oauth-client list`
// shows it.
type oauthClientRow struct {
	ID, Name, Kind      string
	RedirectURIs        []string
	Registered          time.Time
	FirstUsed, LastUsed string
	Grants, Tokens      int
}

func oauthTime(t *time.Time, zero string) string {
	if t == nil || t.IsZero() {
		return zero
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func (c *Console) renderOAuthClients(w http.ResponseWriter, r *http.Request, ss *session, status int, done, msg string) {
	cls, err := c.opts.Admin.OAuthClients(adminCtx(r.Context(), ss))
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	d := oauthClientsData{Clients: make([]oauthClientRow, len(cls))}
	for i, cl := range cls {
		kind := "public"
		if cl.Confidential {
			kind = "confidential"
		}
		d.Clients[i] = oauthClientRow{ID: cl.ID, Name: cl.Name, Kind: kind, RedirectURIs: cl.RedirectURIs, Registered: cl.Registered,
			FirstUsed: oauthTime(cl.FirstUsed, "never"), LastUsed: oauthTime(cl.LastUsed, "never"), Grants: cl.Grants, Tokens: cl.Tokens}
	}
	c.render(w, status, "oauth-clients", pageData{Title: "OAuth clients", Nav: "oauth-clients", User: ss.user, Page: d, Done: done, Message: msg})
}

func (c *Console) oauthClientsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderOAuthClients(w, r, ss, http.StatusOK, "", "")
}

// oauthClientDelete deletes a client with its grants, codes and tokens
// (admin.Service.DeleteOAuthClient, audited as the operator).
func (c *Console) oauthClientDelete(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	id := r.PathValue("id")
	del, err := c.opts.Admin.DeleteOAuthClient(adminCtx(r.Context(), ss), id)
	if err != nil {
		status, msg := c.actionError(err)
		c.renderOAuthClients(w, r, ss, status, "", msg)
		return
	}
	c.renderOAuthClients(w, r, ss, http.StatusOK, deletedText(del), "")
}

// deletedText says what a deletion removed.
func deletedText(d admin.DeletedOAuthClient) string {
	return fmt.Sprintf("Deleted OAuth client %s with %d grant(s), %d authorization code(s) and %d token(s): its tokens are refused from now on.",
		d.ID, d.Grants, d.Codes, d.Tokens)
}
