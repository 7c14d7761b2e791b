package console

import (
	"net/http"
	"strings"
)

// accessRoutes adds the Tokens page (tokens.go) and the Users page
// (users.go): personal access tokens, sign-in users, their admin role and
// their agent grants, all through the admin model.
func (c *Console) accessRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+Path+"tokens", c.withSession(c.tokensPage))
	mux.HandleFunc("POST "+Path+"tokens", c.withSession(c.tokenCreate))
	mux.HandleFunc("POST "+Path+"tokens/{id}/revoke", c.withSession(c.tokenRevoke))
	mux.HandleFunc("GET "+Path+"users", c.withSession(c.usersPage))
	mux.HandleFunc("POST "+Path+"users", c.withSession(c.userAdd))
	mux.HandleFunc("POST "+Path+"users/grants", c.withSession(c.userGrantsAny))
	mux.HandleFunc("POST "+Path+"users/{user}/admin", c.withSession(c.userAdmin))
	mux.HandleFunc("POST "+Path+"users/{user}/agents", c.withSession(c.userAgents))
	mux.HandleFunc("POST "+Path+"users/{user}/password", c.withSession(c.userPassword))
	mux.HandleFunc("POST "+Path+"users/{user}/remove", c.withSession(c.userRemove))
}

// accessSplit reads a comma-separated form field: items trimmed, empty ones
// dropped; nil when none is left.
func accessSplit(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// accessJoin is a list for a table cell: its items joined, or none.
func accessJoin(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, ", ")
}
