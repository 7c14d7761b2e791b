package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/toolbus/toolbus/store"
)

// OAuthClient is a client registered through Dynamic Client Registration
// (RFC 7591), as operators see it: never its secret.
type OAuthClient struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	RedirectURIs []string `json:"redirectUris"`
	// Confidential clients hold a secret; public ones prove themselves
	// with PKCE alone.
	Confidential bool      `json:"confidential"`
	Registered   time.Time `json:"registered"`
	// FirstUsed is when a user first consented to it; LastUsed the newest
	// use of its tokens. Left out when never.
	FirstUsed *time.Time `json:"firstUsed,omitempty"`
	LastUsed  *time.Time `json:"lastUsed,omitempty"`
	// Grants are its live grants (a refresh token not revoked or
	// expired); Tokens its live access tokens.
	Grants int `json:"grants"`
	Tokens int `json:"tokens"`
}

// NewOAuthClient converts a stored client.
func NewOAuthClient(c store.OAuthClientSummary) OAuthClient {
	uris := c.RedirectURIs
	if uris == nil {
		uris = []string{}
	}
	return OAuthClient{ID: c.ID, Name: c.Name, RedirectURIs: uris, Confidential: c.Confidential, Registered: c.Created.UTC(),
		FirstUsed: optTime(c.Used), LastUsed: optTime(c.LastUsed), Grants: c.Grants, Tokens: c.Tokens}
}

// DeletedOAuthClient is the answer of DeleteOAuthClient: what went with
// the client.
type DeletedOAuthClient struct {
	Done string `json:"done"`
	ID   string `json:"id"`
	// Grants, Codes and Tokens are the rows removed with it: every grant
	// (live or ended), authorization code and access token.
	Grants int `json:"grants"`
	Codes  int `json:"codes"`
	Tokens int `json:"tokens"`
}

type oauthClientList struct {
	Clients []OAuthClient `json:"clients"`
}

// OAuthClients lists the registered OAuth clients, oldest first.
func (s *Service) OAuthClients(ctx context.Context) ([]OAuthClient, error) {
	cs, err := s.opts.Store.ListOAuthClients(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]OAuthClient, len(cs))
	for i, c := range cs {
		out[i] = NewOAuthClient(c)
	}
	return out, nil
}

// DeleteOAuthClient deletes a registered OAuth client with its grants,
// authorization codes and tokens: its tokens stop working at once (in
// this process; other replicas within the token cache's TTL), its refresh
// tokens are refused. The client may register again, under a new ID; its
// users then consent again.
func (s *Service) DeleteOAuthClient(ctx context.Context, id string) (DeletedOAuthClient, error) {
	var out DeletedOAuthClient
	err := s.change(ctx, "oauth_client.delete", "oauth client "+id, func() error {
		d, err := s.opts.Store.DeleteOAuthClient(ctx, id)
		if err != nil {
			return err
		}
		out = DeletedOAuthClient{Done: "deleted OAuth client " + id, ID: id, Grants: d.Grants, Codes: d.Codes, Tokens: d.Tokens}
		return nil
	})
	return out, err
}

// oauthRoutes adds GET /oauth-clients and DELETE /oauth-clients/{id}.
func (h *Handler) oauthRoutes(r *mux.Router, p string) {
	type none = struct{}
	r.Handle(p+"/oauth-clients", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		cs, err := h.svc.OAuthClients(r.Context())
		return oauthClientList{Clients: cs}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/oauth-clients/{id}", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		return h.svc.DeleteOAuthClient(r.Context(), mux.Vars(r)["id"])
	})).Methods(http.MethodDelete)
}

// OAuthClients is Service.OAuthClients over HTTP.
func (c *Client) OAuthClients(ctx context.Context) ([]OAuthClient, error) {
	var out oauthClientList
	return out.Clients, c.do(ctx, http.MethodGet, "/oauth-clients", nil, nil, &out)
}

// DeleteOAuthClient is Service.DeleteOAuthClient over HTTP.
func (c *Client) DeleteOAuthClient(ctx context.Context, id string) (DeletedOAuthClient, error) {
	var out DeletedOAuthClient
	return out, c.do(ctx, http.MethodDelete, "/oauth-clients/"+seg(id), nil, nil, &out)
}
