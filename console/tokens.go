package console

import (
	"net/http"
	"slices"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/store"
)

// tokensData is the Tokens page's data.
type tokensData struct {
	// Filter is the user whose tokens are listed ("" = every user).
	Filter string
	Tokens []tokenRow
	// Users are the sign-in users, offered as the new token's user.
	Users []string
	Form  tokenForm
	// Created is the token just created, with its secret: only in the
	// answer to the form that created it.
	Created *admin.CreatedToken
}

// tokenRow is one token as `toolbus token list` shows it.
type tokenRow struct {
	ID, User, Name, Scopes, Entities, Agents string
	ReadOnly                                 bool
	Created                                  time.Time
	Expires, LastUsed, Revoked               string
	IsRevoked                                bool
	Audience, Client                         string
}

// tokenForm is the create form's fields, kept when the model refuses
// them.
type tokenForm struct {
	User, Name, TTL, Agents, Entities string
	ReadOnly                          bool
	Scopes                            []scopeBox
}

type scopeBox struct {
	Name    string
	Checked bool
}

// newTokenForm is the create form with the default scopes checked.
func (c *Console) newTokenForm() tokenForm {
	f := tokenForm{}
	for _, s := range c.opts.Admin.ValidScopes() {
		f.Scopes = append(f.Scopes, scopeBox{Name: s, Checked: slices.Contains(store.DefaultScopes, s)})
	}
	return f
}

func optTimeText(t *time.Time, zero string) string {
	if t == nil || t.IsZero() {
		return zero
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func entitiesText(es []store.Entity) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return accessJoin(parts, "any")
}

// renderTokens renders the Tokens page with the tokens of filter.
func (c *Console) renderTokens(w http.ResponseWriter, r *http.Request, ss *session, status int, d tokensData, done, msg string) {
	ctx := adminCtx(r.Context(), ss)
	toks, err := c.opts.Admin.ListTokens(ctx, d.Filter)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	d.Tokens = make([]tokenRow, len(toks))
	for i, t := range toks {
		d.Tokens[i] = tokenRow{ID: t.ID, User: t.User, Name: t.Name, Scopes: accessJoin(t.Scopes, "none"),
			Entities: entitiesText(t.Entities), Agents: accessJoin(t.Agents, "any"), ReadOnly: t.ReadOnly, Created: t.Created,
			Expires: optTimeText(t.ExpiresAt, "never"), LastUsed: optTimeText(t.LastUsed, "never"),
			Revoked: optTimeText(t.RevokedAt, "—"), IsRevoked: t.RevokedAt != nil, Audience: t.Audience, Client: t.Client}
	}
	if users, err := c.opts.Admin.ListUsers(ctx); err == nil {
		for _, u := range users {
			d.Users = append(d.Users, u.ID)
		}
	}
	c.render(w, status, "tokens", pageData{Title: "Tokens", Nav: "tokens", User: ss.user, Page: d, Done: done, Message: msg})
}

func (c *Console) tokensPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderTokens(w, r, ss, http.StatusOK, tokensData{Filter: r.URL.Query().Get("user"), Form: c.newTokenForm()}, "", "")
}

// tokenCreate creates a token from the form and shows its secret once, in
// this answer only.
func (c *Console) tokenCreate(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	pf := r.PostForm
	f := tokenForm{User: pf.Get("user"), Name: pf.Get("name"), TTL: pf.Get("ttl"), Agents: pf.Get("agents"),
		Entities: pf.Get("entities"), ReadOnly: pf.Get("read_only") != ""}
	// No box checked is an empty list, which the model refuses: it is not
	// the defaults.
	scopes := []string{}
	for _, s := range c.opts.Admin.ValidScopes() {
		on := slices.Contains(pf["scope"], s)
		f.Scopes = append(f.Scopes, scopeBox{Name: s, Checked: on})
	}
	for _, s := range pf["scope"] {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s) // unknown ones too: the model names the valid scopes
		}
	}
	d := tokensData{Filter: pf.Get("filter"), Form: f}
	req := admin.TokenRequest{User: f.User, Name: f.Name, Scopes: scopes, ReadOnly: f.ReadOnly, TTL: f.TTL, Agents: accessSplit(f.Agents)}
	for _, s := range accessSplit(f.Entities) {
		e, err := store.ParseEntity(s)
		if err != nil {
			status, msg := c.actionError(err)
			c.renderTokens(w, r, ss, status, d, "", msg)
			return
		}
		req.Entities = append(req.Entities, e)
	}
	created, err := c.opts.Admin.CreateToken(adminCtx(r.Context(), ss), req)
	if err != nil {
		status, msg := c.actionError(err)
		c.renderTokens(w, r, ss, status, d, "", msg)
		return
	}
	d.Created, d.Form = &created, c.newTokenForm()
	c.renderTokens(w, r, ss, http.StatusOK, d, "Created token "+created.Token.ID+" for user "+created.Token.User+".", "")
}

func (c *Console) tokenRevoke(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	id := r.PathValue("id")
	d := tokensData{Filter: r.PostForm.Get("filter"), Form: c.newTokenForm()}
	if err := c.opts.Admin.RevokeToken(adminCtx(r.Context(), ss), id); err != nil {
		status, msg := c.actionError(err)
		c.renderTokens(w, r, ss, status, d, "", msg)
		return
	}
	c.renderTokens(w, r, ss, http.StatusOK, d, "Revoked token "+id+": it is refused from now on.", "")
}
