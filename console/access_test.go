package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/store"
)

var secretRE = regexp.MustCompile(`id="new-token-secret" data-token="([^"]+)">([^<]+)<`)

// TestConsoleTokens: the Tokens page lists the tokens as the CLI does;
// the form creates one whose secret is shown once (in that answer, never
// again) and authenticates; revoke refuses it at once; the model's
// refusals show with their status; changes are audited as the operator.
func TestConsoleTokens(t *testing.T) {
	srv, base := startConsole(t)
	c := browser(t)
	signIn(t, c, base, "ops")

	resp, body := do(t, c, http.MethodGet, base+"/console/tokens", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="token-create"`) {
		t.Fatalf("tokens page: %d\n%s", resp.StatusCode, body)
	}
	// The default scopes are checked, the others offered.
	for _, want := range []string{`value="tools:list" id="scope-tools:list" checked`, `value="tools:call" id="scope-tools:call" checked`, `value="admin" id="scope-admin">`} {
		if !strings.Contains(body, want) {
			t.Errorf("create form misses %s", want)
		}
	}

	form := url.Values{"user": {"dev"}, "name": {"ci <nightly>"}, "scope": {"tools:list"}, "ttl": {"720h"}, "agents": {"weather, files"}, "read_only": {"on"}}
	resp, body = do(t, c, http.MethodPost, base+"/console/tokens", form, nil)
	m := secretRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || !strings.Contains(body, "not shown again") {
		t.Fatalf("create: %d, secret %v\n%s", resp.StatusCode, m, body)
	}
	id, secret := m[1], m[2]
	tok, err := srv.Store().AuthenticateToken(ctx(t), secret)
	if err != nil || tok.ID != id || tok.UserID != "dev" || !tok.ReadOnly || strings.Join(tok.Scopes, ",") != "tools:list" ||
		strings.Join(tok.Agents, ",") != "weather,files" || tok.ExpiresAt.IsZero() || tok.Name != "ci <nightly>" {
		t.Fatalf("the created token: %+v, %v", tok, err)
	}
	if strings.Contains(body, "ci <nightly>") {
		t.Error("the token's name is not escaped")
	}
	row := regexp.MustCompile(`(?s)<tr data-token="` + regexp.QuoteMeta(id) + `" data-state="active">.*?</tr>`).FindString(body)
	for _, want := range []string{">dev<", "ci &lt;nightly&gt;", "tools:list", ">yes<", "weather, files", `action="/console/tokens/` + id + `/revoke"`} {
		if !strings.Contains(row, want) {
			t.Errorf("the token's row misses %q:\n%s", want, row)
		}
	}
	// Shown once: the list does not show it again.
	if _, body = do(t, c, http.MethodGet, base+"/console/tokens", nil, nil); strings.Contains(body, secret) || !strings.Contains(body, id) {
		t.Error("the list shows the secret again, or not the token")
	}
	// The filter.
	if _, body = do(t, c, http.MethodGet, base+"/console/tokens?user=nobody", nil, nil); strings.Contains(body, `data-token="`+id) || !strings.Contains(body, `id="no-tokens"`) {
		t.Error("?user=nobody lists dev's token")
	}

	// The model's refusals, with the form kept.
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		msg    string
	}{
		{"bad ttl", url.Values{"user": {"dev"}, "scope": {"tools:list"}, "ttl": {"soon"}}, http.StatusBadRequest, `ttl &#34;soon&#34;: want a Go duration`},
		{"unknown scope", url.Values{"user": {"dev"}, "scope": {"root"}}, http.StatusBadRequest, `unknown scope &#34;root&#34;`},
		{"no scope", url.Values{"user": {"dev"}}, http.StatusBadRequest, "empty scope list"},
		{"bad user", url.Values{"user": {"a/b"}, "scope": {"tools:list"}}, http.StatusBadRequest, "invalid token spec: user"},
		{"bad entity", url.Values{"user": {"dev"}, "scope": {"tools:list"}, "entities": {"noslash"}}, http.StatusBadRequest, "want TYPE/ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, c, http.MethodPost, base+"/console/tokens", tc.form, nil)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.msg) || strings.Contains(body, `id="new-token-secret"`) {
				t.Fatalf("%d, want %d and %q\n%s", resp.StatusCode, tc.status, tc.msg, body)
			}
			if !strings.Contains(body, `id="token-user" name="user" value="`+tc.form.Get("user")+`"`) {
				t.Errorf("the form lost the user typed")
			}
		})
	}

	// Revoke: refused from now on.
	resp, body = do(t, c, http.MethodPost, base+"/console/tokens/"+id+"/revoke", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<tr data-token="`+id+`" data-state="revoked">`) || !strings.Contains(body, "Revoked token "+id) {
		t.Fatalf("revoke: %d\n%s", resp.StatusCode, body)
	}
	if _, err := srv.Store().AuthenticateToken(ctx(t), secret); err == nil {
		t.Fatal("the revoked token still authenticates")
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/tokens/tb_nothere/revoke", url.Values{}, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "not found") {
		t.Errorf("revoke of an unknown token: %d\n%s", resp.StatusCode, body)
	}

	e := adminAudit(t, srv, "of the revocation", func(e store.AuditEvent) bool {
		return e.Action == "token.revoke" && e.Target == "token "+id
	})
	if e.Source != "console" || e.UserID != "ops" || e.Outcome != "ok" {
		t.Errorf("revocation audited as %+v, want source console, user ops", e)
	}
	e = adminAudit(t, srv, "of the refused creation", func(e store.AuditEvent) bool {
		return e.Action == "token.create" && e.Outcome != "ok" && strings.Contains(e.Reason, "soon")
	})
	if e.Source != "console" || e.UserID != "ops" {
		t.Errorf("refused creation audited as %+v", e)
	}
}

var passwordRE = regexp.MustCompile(`id="new-user-password" data-user="([^"]+)">([^<]+)<`)

// TestConsoleUsers: add a user (the generated password shown once
// signs in), give and take the admin role, grant agents and lift the
// grant, reset a password, remove; the operator cannot take their own role
// nor remove themselves.
func TestConsoleUsers(t *testing.T) {
	srv, base := startConsole(t)
	st := srv.Store()
	c := browser(t)
	signIn(t, c, base, "ops")

	resp, body := do(t, c, http.MethodPost, base+"/console/users", url.Values{"user": {"carol"}, "admin": {"on"}}, nil)
	m := passwordRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || m[1] != "carol" || !strings.Contains(body, `<tr data-user="carol" data-admin="yes">`) {
		t.Fatalf("add: %d %v\n%s", resp.StatusCode, m, body)
	}
	if err := st.VerifyUser(ctx(t), "carol", []byte(m[2])); err != nil {
		t.Fatalf("the generated password does not sign in: %v", err)
	}
	if _, body := do(t, c, http.MethodGet, base+"/console/users", nil, nil); strings.Contains(body, m[2]) {
		t.Fatal("the users page shows the password again")
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/users", url.Values{"user": {"carol"}}, nil); resp.StatusCode != http.StatusConflict || passwordRE.MatchString(body) {
		t.Errorf("adding carol again: %d", resp.StatusCode)
	}

	// Admin off and on.
	if resp, body := do(t, c, http.MethodPost, base+"/console/users/carol/admin", url.Values{"admin": {"off"}}, nil); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `<tr data-user="carol" data-admin="no">`) {
		t.Fatalf("admin off: %d\n%s", resp.StatusCode, body)
	}
	if st, _ := st.UserState(ctx(t), "carol"); st.Admin {
		t.Fatal("carol is still an admin")
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/users/dev/admin", url.Values{"admin": {"on"}}, nil); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `<tr data-user="dev" data-admin="yes">`) {
		t.Fatalf("admin on: %d", resp.StatusCode)
	}

	// Grants: set, shown, lifted; a user without a sign-in too.
	resp, body = do(t, c, http.MethodPost, base+"/console/users/carol/agents", url.Values{"agents": {"weather, files"}}, nil)
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`(?s)<tr data-user="carol".*?class="grants" data-agents="files, weather"><span class="mono">files, weather</span>`).MatchString(body) {
		t.Fatalf("grant: %d\n%s", resp.StatusCode, body)
	}
	if all, _ := st.ListUserAgents(ctx(t)); strings.Join(all["carol"], ",") != "files,weather" {
		t.Fatalf("carol's agents in the store: %v", all["carol"])
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/users/carol/agents", url.Values{"agents": {"bad/agent"}}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "invalid token spec") {
		t.Errorf("bad agent name: %d\n%s", resp.StatusCode, body)
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/users/grants", url.Values{"user": {"ci-bot"}, "agents": {"files"}}, nil); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `<table id="other-grants">`) || !strings.Contains(body, `<tr data-user="ci-bot">`) {
		t.Errorf("grant of a user without a sign-in: %d\n%s", resp.StatusCode, body)
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/users/carol/agents", url.Values{"agents": {""}}, nil)
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`(?s)<tr data-user="carol".*?class="grants" data-agents="">every agent<`).MatchString(body) {
		t.Fatalf("lift: %d\n%s", resp.StatusCode, body)
	}

	// Reset a password.
	resp, body = do(t, c, http.MethodPost, base+"/console/users/carol/password", url.Values{}, nil)
	m = passwordRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || m[1] != "carol" {
		t.Fatalf("new password: %d\n%s", resp.StatusCode, body)
	}
	if err := st.VerifyUser(ctx(t), "carol", []byte(m[2])); err != nil {
		t.Fatalf("the new password does not sign in: %v", err)
	}

	// The operator cannot lock themselves out; nothing changed.
	for _, p := range []string{"/console/users/ops/admin", "/console/users/ops/remove"} {
		resp, body := do(t, c, http.MethodPost, base+p, url.Values{"admin": {"off"}}, nil)
		if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "lock you out of the console") {
			t.Errorf("POST %s: %d\n%s", p, resp.StatusCode, body)
		}
	}
	if st, err := st.UserState(ctx(t), "ops"); err != nil || !st.Admin {
		t.Fatalf("ops after the refusals: %+v %v", st, err)
	}
	if resp, _ := do(t, c, http.MethodGet, base+"/console/users", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the operator's session ended: %d", resp.StatusCode)
	}
	consoleAudit(t, srv, "of the self-removal", func(e store.AuditEvent) bool {
		return e.Action == "user.remove" && e.Outcome == "refused" && e.UserID == "ops"
	})

	// Remove.
	if _, _, err := st.CreateToken(ctx(t), store.TokenSpec{UserID: "carol"}); err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/users/carol/remove", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(body, `data-user="carol"`) || !strings.Contains(body, "revoked their 1 token") {
		t.Fatalf("remove: %d\n%s", resp.StatusCode, body)
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/users/carol/remove", url.Values{}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("remove again: %d\n%s", resp.StatusCode, body)
	}
	e := adminAudit(t, srv, "of the removal", func(e store.AuditEvent) bool {
		return e.Action == "user.remove" && e.Target == "user carol" && e.Outcome == "ok"
	})
	if e.Source != "console" || e.UserID != "ops" {
		t.Errorf("removal audited as %+v", e)
	}
}

// TestConsoleAccessRefusals: without a session the pages are the sign-in
// form and the actions change nothing; a cross-site post is refused.
func TestConsoleAccessRefusals(t *testing.T) {
	srv, base := startConsole(t)
	secret, tok, err := srv.Store().CreateToken(ctx(t), store.TokenSpec{UserID: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	stillValid := func(t *testing.T) {
		t.Helper()
		if _, err := srv.Store().AuthenticateToken(context.Background(), secret); err != nil {
			t.Fatalf("the token was revoked: %v", err)
		}
		if st, err := srv.Store().UserState(ctx(t), "dev"); err != nil || st.Admin {
			t.Fatalf("dev changed: %+v %v", st, err)
		}
	}
	anon := browser(t)
	for _, p := range []string{"/console/tokens", "/console/users"} {
		if resp, body := do(t, anon, http.MethodGet, base+p, nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
			t.Errorf("GET %s without a session: %d", p, resp.StatusCode)
		}
	}
	posts := map[string]url.Values{
		"/console/tokens":                       {"user": {"dev"}, "scope": {"admin"}},
		"/console/tokens/" + tok.ID + "/revoke": {},
		"/console/users":                        {"user": {"mallory"}, "admin": {"on"}},
		"/console/users/dev/admin":              {"admin": {"on"}},
		"/console/users/dev/remove":             {},
	}
	for p, f := range posts {
		if resp, body := do(t, anon, http.MethodPost, base+p, f, nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "new-token-secret") {
			t.Errorf("POST %s without a session: %d", p, resp.StatusCode)
		}
	}
	// A non-admin gets no session at all (TestConsoleRefusals); an admin's
	// session does not make a cross-site form work.
	c := browser(t)
	signIn(t, c, base, "ops")
	for p, f := range posts {
		if resp, body := do(t, c, http.MethodPost, base+p, f, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") {
			t.Errorf("cross-site POST %s: %d", p, resp.StatusCode)
		}
	}
	stillValid(t)
	if toks, _ := srv.Store().ListTokens(ctx(t), "dev"); len(toks) != 1 {
		t.Errorf("dev has %d tokens, want 1", len(toks))
	}
	if _, err := srv.Store().UserState(ctx(t), "mallory"); err == nil {
		t.Error("mallory was added")
	}
}
