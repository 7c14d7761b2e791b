package admin_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// do sends one request with an optional bearer secret and returns the
// status and body.
func do(t *testing.T, method, url, secret, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx(t), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	return resp.StatusCode, string(b)
}

// TestEndpointsNeedAdminScope calls every endpoint without a token, with a
// token lacking the admin scope, then with an admin token.
func TestEndpointsNeedAdminScope(t *testing.T) {
	e := startEnv(t)
	startAgent(t, e.srv, "agentx")
	p := e.base + "/api/v1/admin"
	cases := []struct {
		name, method, path, body string
		want                     int // with the admin scope
	}{
		{"list tokens", http.MethodGet, "/tokens", "", http.StatusOK},
		{"create token", http.MethodPost, "/tokens", `{"user":"bob","scopes":["tools:list"]}`, http.StatusCreated},
		{"revoke token", http.MethodDelete, "/tokens/tb_00000000", "", http.StatusNotFound},
		{"list identities", http.MethodGet, "/identities", "", http.StatusOK},
		{"add identity", http.MethodPost, "/identities", `{"username":"dev1","role":"client"}`, http.StatusCreated},
		{"disable identity", http.MethodPost, "/identities/dev1/disable", "", http.StatusOK},
		{"enable identity", http.MethodPost, "/identities/dev1/enable", "", http.StatusOK},
		{"rotate password", http.MethodPost, "/identities/dev1/password", `{"password":"a-new-password-1"}`, http.StatusOK},
		{"remove identity", http.MethodDelete, "/identities/dev1", "", http.StatusOK},
		{"list rules", http.MethodGet, "/rules", "", http.StatusOK},
		{"add rule", http.MethodPost, "/rules", `{"access":"read","filter":"sensors/#"}`, http.StatusCreated},
		{"remove built-in rule", http.MethodDelete, "/rules/builtin-agent-req", "", http.StatusForbidden},
		{"remove unknown rule", http.MethodDelete, "/rules/999", "", http.StatusNotFound},
		{"clients", http.MethodGet, "/clients", "", http.StatusOK},
		{"agents", http.MethodGet, "/agents", "", http.StatusOK},
		{"contexts", http.MethodGet, "/contexts", "", http.StatusOK},
		{"evict unknown context", http.MethodDelete, "/contexts/gw1/u1/s1/_/_", "", http.StatusNotFound},
		{"admin role of unknown user", http.MethodPut, "/users/ghost/admin", `{"admin":true}`, http.StatusNotFound},
		{"unknown endpoint", http.MethodGet, "/nothing", "", http.StatusNotFound},
	}
	for _, who := range []struct {
		name, secret string
		want         int
	}{{"no token", "", http.StatusUnauthorized}, {"no admin scope", e.userSecret, http.StatusForbidden}} {
		for _, tc := range cases {
			t.Run(who.name+"/"+tc.name, func(t *testing.T) {
				status, body := do(t, tc.method, p+tc.path, who.secret, tc.body)
				if status != who.want {
					t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, status, body, who.want)
				}
				var ae admin.APIError
				if err := json.Unmarshal([]byte(body), &ae); err != nil || ae.Code == "" || ae.Message == "" {
					t.Fatalf("body %q is not the JSON error shape", body)
				}
			})
		}
	}
	// Nothing the refused calls asked for happened.
	if ids, _ := e.srv.Store().ListIdentities(ctx(t)); len(ids) != 1 { // agentx only
		t.Fatalf("refused calls changed identities: %v", ids)
	}
	if rules, _ := e.srv.Store().ListRules(ctx(t)); len(rules) != 0 {
		t.Fatalf("refused calls added rules: %v", rules)
	}
	if toks, _ := e.srv.Store().ListTokens(ctx(t), "bob"); len(toks) != 0 {
		t.Fatalf("refused calls made tokens: %v", toks)
	}
	for _, tc := range cases {
		t.Run("admin/"+tc.name, func(t *testing.T) {
			status, body := do(t, tc.method, p+tc.path, e.adminSecret, tc.body)
			if status != tc.want {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, status, body, tc.want)
			}
			if !json.Valid([]byte(body)) {
				t.Fatalf("body %q is not JSON", body)
			}
		})
	}
}

func TestTokens(t *testing.T) {
	e := startEnv(t)
	created, err := e.adm.CreateToken(ctx(t), admin.TokenRequest{User: "ops", Scopes: []string{store.ScopeAdmin}, TTL: "1h", Name: "second admin"})
	if err != nil {
		t.Fatal(err)
	}
	if created.Secret == "" || !strings.HasPrefix(created.Secret, created.Token.ID+"_") || created.Token.ExpiresAt == nil {
		t.Fatalf("created %+v", created)
	}
	// The new token works at once, and the list never shows a secret.
	ops, err := admin.NewClient(e.base, created.Secret, admin.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := ops.ListTokens(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 3 {
		t.Fatalf("want 3 tokens, got %+v", toks)
	}
	_, raw := do(t, http.MethodGet, e.base+"/api/v1/admin/tokens", e.adminSecret, "")
	for _, s := range []string{created.Secret, e.adminSecret, e.userSecret} {
		if strings.Contains(raw, s[len("tb_xxxxxxxx_"):]) {
			t.Fatalf("the token list shows a secret: %s", raw)
		}
	}
	if only, err := e.adm.ListTokens(ctx(t), "ops"); err != nil || len(only) != 1 || only[0].Name != "second admin" {
		t.Fatalf("list of ops = %+v, %v", only, err)
	}

	for _, tc := range []struct {
		name string
		req  admin.TokenRequest
		want error
	}{
		{"bad user", admin.TokenRequest{User: "a/b"}, store.ErrInvalidTokenSpec},
		{"empty scopes", admin.TokenRequest{User: "a", Scopes: []string{}}, store.ErrInvalidTokenSpec},
		{"bad ttl", admin.TokenRequest{User: "a", TTL: "soon"}, admin.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.adm.CreateToken(ctx(t), tc.req)
			var ae *admin.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !errors.Is(err, admin.ErrInvalidRequest) {
				t.Fatalf("err = %v, want a 400 invalid_request", err)
			}
		})
	}

	if err := e.adm.RevokeToken(ctx(t), created.Token.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.ListTokens(ctx(t), ""); !errors.Is(err, admin.ErrUnauthenticated) {
		t.Fatalf("revoked token: %v, want ErrUnauthenticated", err)
	}
	if err := e.adm.RevokeToken(ctx(t), "tb_00000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke unknown: %v, want ErrNotFound", err)
	}
	user, _ := admin.NewClient(e.base, e.userSecret, admin.ClientOptions{})
	if _, err := user.ListTokens(ctx(t), ""); !errors.Is(err, admin.ErrForbidden) {
		t.Fatalf("token without admin: %v, want ErrForbidden", err)
	}
}

func TestIdentities(t *testing.T) {
	e := startEnv(t)
	ch, err := e.adm.AddIdentity(ctx(t), admin.IdentityRequest{Username: "dev1", Role: acl.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Password) < admin.MinPasswordLen || !ch.Live || ch.Identity.Role != acl.RoleClient {
		t.Fatalf("add = %+v, want a generated password", ch)
	}
	conn, err := connectMQTT(t, e.srv, "dev1", ch.Password, "dev1-a")
	if err != nil {
		t.Fatalf("the generated password does not log in: %v", err)
	}
	cls, err := e.adm.Clients(ctx(t))
	if err != nil || len(cls) != 1 || cls[0].ClientID != "dev1-a" || cls[0].Username != "dev1" ||
		cls[0].ConnectedSince == nil || cls[0].ProtocolVersion != 4 || cls[0].Remote == "" {
		t.Fatalf("clients = %+v, %v", cls, err)
	}

	if _, err := e.adm.AddIdentity(ctx(t), admin.IdentityRequest{Username: "dev1", Role: acl.RoleClient}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("add twice: %v, want ErrExists", err)
	}
	for _, req := range []admin.IdentityRequest{
		{Username: "dev2", Role: "boss"},
		{Username: "dev/2", Role: acl.RoleClient},
		{Username: "dev2", Role: acl.RoleClient, Password: "short"},
	} {
		if _, err := e.adm.AddIdentity(ctx(t), req); !errors.Is(err, admin.ErrInvalidRequest) {
			t.Errorf("add %+v: %v, want ErrInvalidRequest", req, err)
		}
	}

	ch, err = e.adm.SetDisabled(ctx(t), "dev1", true)
	if err != nil || !ch.Identity.Disabled || ch.Disconnected != 1 {
		t.Fatalf("disable = %+v, %v; want one client disconnected", ch, err)
	}
	select {
	case <-conn.lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the disabled identity's client is still connected")
	}
	if ch, err = e.adm.SetDisabled(ctx(t), "dev1", false); err != nil || ch.Identity.Disabled {
		t.Fatalf("enable = %+v, %v", ch, err)
	}
	ch, err = e.adm.SetPassword(ctx(t), "dev1", admin.PasswordRequest{})
	if err != nil || len(ch.Password) < admin.MinPasswordLen {
		t.Fatalf("rotate = %+v, %v; want a generated password", ch, err)
	}
	if _, err := connectMQTT(t, e.srv, "dev1", ch.Password, "dev1-b"); err != nil {
		t.Fatalf("the rotated password does not log in: %v", err)
	}
	ids, err := e.adm.ListIdentities(ctx(t))
	if err != nil || len(ids) != 1 || ids[0].Username != "dev1" || ids[0].Disabled {
		t.Fatalf("identities = %+v, %v", ids, err)
	}
	if ch, err = e.adm.RemoveIdentity(ctx(t), "dev1"); err != nil || ch.Disconnected != 1 {
		t.Fatalf("remove = %+v, %v; want one client disconnected", ch, err)
	}
	if _, err := e.adm.SetDisabled(ctx(t), "dev1", true); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("disable removed: %v, want ErrNotFound", err)
	}
}

func TestRules(t *testing.T) {
	e := startEnv(t)
	rules, err := e.adm.ListRules(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	builtin := 0
	for _, r := range rules {
		if !r.Builtin || !strings.HasPrefix(r.Filter, "ff/v2/") || r.Role == "" {
			t.Errorf("rule %+v in a fresh store: want only built-in ff/v2 rules", r)
		}
		builtin++
	}
	if builtin < 6 {
		t.Fatalf("%d built-in rules listed, want the platform's and the agents'", builtin)
	}
	if _, err := e.srv.Store().AddIdentity(ctx(t), "dev1", acl.RoleClient, []byte("dev1-password-x")); err != nil {
		t.Fatal(err)
	}
	r, err := e.adm.AddRule(ctx(t), admin.RuleRequest{Username: "dev1", Access: "readwrite", Filter: "sensors/#"})
	if err != nil || r.ID == "" || r.Builtin || r.Created == nil {
		t.Fatalf("add = %+v, %v", r, err)
	}
	for _, tc := range []struct {
		name string
		req  admin.RuleRequest
		want error
	}{
		{"duplicate", admin.RuleRequest{Username: "dev1", Access: "readwrite", Filter: "sensors/#"}, store.ErrExists},
		{"reserved tree", admin.RuleRequest{Access: "read", Filter: "ff/v2/mcp/#"}, admin.ErrInvalidRequest},
		{"retired v1 tree", admin.RuleRequest{Access: "read", Filter: "ff/v1/mcp/#"}, admin.ErrInvalidRequest},
		{"bad access", admin.RuleRequest{Access: "all", Filter: "x"}, admin.ErrInvalidRequest},
		{"unknown identity", admin.RuleRequest{Username: "ghost", Access: "read", Filter: "x"}, store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.adm.AddRule(ctx(t), tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("add %+v: %v, want %v", tc.req, err, tc.want)
			}
		})
	}
	rules, _ = e.adm.ListRules(ctx(t))
	if last := rules[len(rules)-1]; last.ID != r.ID || last.Username != "dev1" || last.Access != "readwrite" {
		t.Fatalf("list ends with %+v, want the new rule", last)
	}
	err = e.adm.RemoveRule(ctx(t), "builtin-agent-req")
	var ae *admin.APIError
	if !errors.Is(err, admin.ErrBuiltinRule) || !errors.As(err, &ae) || ae.Status != http.StatusForbidden || !strings.Contains(ae.Message, "cannot be removed") {
		t.Fatalf("remove built-in: %v, want 403 builtin_rule with a clear message", err)
	}
	if err := e.adm.RemoveRule(ctx(t), "seven"); !errors.Is(err, admin.ErrInvalidRequest) {
		t.Fatalf("remove 'seven': %v, want ErrInvalidRequest", err)
	}
	if err := e.adm.RemoveRule(ctx(t), r.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.adm.RemoveRule(ctx(t), r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("remove twice: %v, want ErrNotFound", err)
	}
}

func TestAgentsAndContexts(t *testing.T) {
	e := startEnv(t)
	startAgent(t, e.srv, "agentx")
	ag, err := e.adm.Agents(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ag.Agents) != 1 || ag.Agents[0].ClientID != "agentx-1" || !ag.Agents[0].Online || ag.ToolsError != "" ||
		len(ag.Tools) != 1 || ag.Tools[0].Name != "echo" {
		t.Fatalf("agents = %+v", ag)
	}
	// Listing the tools made a context for the admin's token.
	cs, err := e.adm.Contexts(ctx(t), "")
	if err != nil || len(cs) != 1 || cs[0].UserID != "root" || cs[0].PlatformID != e.srv.PlatformID() || cs[0].Subscribed.IsZero() ||
		cs[0].LastUsed.Before(cs[0].Subscribed) || cs[0].AgeSeconds < 0 || cs[0].InFlight != 0 {
		t.Fatalf("contexts = %+v, %v", cs, err)
	}
	if other, err := e.adm.Contexts(ctx(t), "alice"); err != nil || len(other) != 0 {
		t.Fatalf("contexts of alice = %+v, %v", other, err)
	}
	key := cs[0].Key()
	c, err := admin.ParseContextKey(key)
	if err != nil || !e.srv.Broker().InlineSubscribed(c.ReplyFilter()) {
		t.Fatalf("%s: %v, or its response topic is not subscribed", key, err)
	}
	before := e.srv.Requester().Stats().Unsubscribes
	if err := e.adm.EvictContext(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	if e.srv.Broker().InlineSubscribed(c.ReplyFilter()) || e.srv.Requester().Stats().Unsubscribes != before+1 {
		t.Fatal("evict returned before the unsubscribe")
	}
	if cs, _ := e.adm.Contexts(ctx(t), ""); len(cs) != 0 {
		t.Fatalf("contexts after evict = %+v", cs)
	}
	if err := e.adm.EvictContext(ctx(t), key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("evict twice: %v, want ErrNotFound", err)
	}
	if err := e.adm.EvictContext(ctx(t), "a/b"); !errors.Is(err, admin.ErrInvalidRequest) {
		t.Fatalf("evict a/b: %v, want ErrInvalidRequest", err)
	}
	// The next call in the context subscribes again.
	if _, err := e.srv.Requester().ListTools(ctx(t), c, "agentx", &contract.Caller{UserID: "root"}); err != nil {
		t.Fatal(err)
	}
	if !e.srv.Broker().InlineSubscribed(c.ReplyFilter()) {
		t.Fatal("not subscribed again after a call")
	}
}

func TestBadBodies(t *testing.T) {
	e := startEnv(t)
	p := e.base + "/api/v1/admin"
	for _, tc := range []struct{ name, method, path, body string }{
		{"unknown field", http.MethodPost, "/identities", `{"username":"x","role":"client","pasword":"typo-typo-typo"}`},
		{"not JSON", http.MethodPost, "/rules", `access=read`},
		{"two values", http.MethodPost, "/rules", `{"access":"read","filter":"a"} {}`},
		{"empty", http.MethodPost, "/tokens", ``},
		{"too large", http.MethodPost, "/tokens", `{"user":"a","name":"` + strings.Repeat("x", 70<<10) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, body := do(t, tc.method, p+tc.path, e.adminSecret, tc.body); status != http.StatusBadRequest {
				t.Fatalf("= %d %s, want 400", status, body)
			}
		})
	}
	if status, _ := do(t, http.MethodPut, p+"/rules", e.adminSecret, `{}`); status != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /rules = %d, want 405", status)
	}
}

// TestWithoutEmbeddedBroker: with an external broker (no Broker, a
// Requester), /clients answers 501 and identity changes say they are not
// live; on a bare store (the data-directory door) what needs a server says so.
func TestWithoutEmbeddedBroker(t *testing.T) {
	b := testenv.StartBroker(t)
	req := requester.New(b.Broker.Bus(), requester.Options{})
	svc, err := admin.NewService(admin.Options{Store: b.Store, Policy: b.Policy, Requester: req})
	if err != nil {
		t.Fatal(err)
	}
	tok := store.Token{ID: "tb_00000000", UserID: "root", Scopes: []string{store.ScopeAdmin}}
	h := admin.NewHandler(svc)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(store.WithToken(r.Context(), tok, "secret")))
	}))
	t.Cleanup(hs.Close)
	c, err := admin.NewClient(hs.URL, "secret", admin.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Clients(ctx(t))
	var ae *admin.APIError
	if !errors.Is(err, admin.ErrNoBroker) || !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented || !strings.Contains(ae.Message, "external") {
		t.Fatalf("clients: %v, want 501 saying the broker is external", err)
	}
	ch, err := c.SetDisabled(ctx(t), b.AgentUser, true)
	if err != nil || ch.Live || ch.Disconnected != 0 {
		t.Fatalf("disable = %+v, %v; want not live", ch, err)
	}
	if cs, err := c.Contexts(ctx(t), ""); err != nil || len(cs) != 0 {
		t.Fatalf("contexts = %+v, %v", cs, err)
	}

	local, err := admin.NewService(admin.Options{Store: b.Store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Clients(ctx(t)); !errors.Is(err, admin.ErrNoServer) {
		t.Fatalf("local clients: %v, want ErrNoServer", err)
	}
	if _, err := local.Agents(ctx(t)); !errors.Is(err, admin.ErrNoServer) {
		t.Fatalf("local agents: %v, want ErrNoServer", err)
	}
}

// TestOnChange: every change, made or refused, reaches the audit hook with
// its actor.
func TestOnChange(t *testing.T) {
	b := testenv.StartBroker(t, testenv.WithoutIdentities())
	var got []admin.Change
	svc, err := admin.NewService(admin.Options{Store: b.Store, Policy: b.Policy, Broker: b.Broker,
		OnChange: func(c admin.Change) { got = append(got, c) }})
	if err != nil {
		t.Fatal(err)
	}
	tok := store.Token{ID: "tb_00000000", UserID: "root", Scopes: []string{store.ScopeAdmin}}
	actx := store.WithToken(ctx(t), tok, "secret")
	if _, err := svc.AddIdentity(actx, admin.IdentityRequest{Username: "dev1", Role: acl.RoleClient}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AddRule(actx, admin.RuleRequest{Access: "read", Filter: "ff/v1/mcp/#"}); err == nil {
		t.Fatal("a rule on the reserved tree was stored")
	}
	if err := svc.RevokeToken(ctx(t), "tb_11111111"); err == nil {
		t.Fatal("revoked an unknown token")
	}
	if len(got) != 3 {
		t.Fatalf("changes seen: %+v", got)
	}
	if c := got[0]; c.Action != "identity.add" || c.Target != "identity dev1" || c.TokenID != tok.ID || c.User != "root" || c.Err != nil || c.Local {
		t.Errorf("first change %+v", c)
	}
	if c := got[1]; c.Action != "rule.add" || c.Err == nil {
		t.Errorf("second change %+v, want a refused rule.add", c)
	}
	if c := got[2]; c.Action != "token.revoke" || !c.Local || !errors.Is(c.Err, store.ErrNotFound) {
		t.Errorf("third change %+v, want a local, refused token.revoke", c)
	}
	// The policy follows rule changes.
	if _, err := svc.AddRule(actx, admin.RuleRequest{Username: "dev1", Access: "write", Filter: "a/b"}); err != nil {
		t.Fatal(err)
	}
	if !b.Policy.Allow(acl.Identity{Username: "dev1", Role: acl.RoleClient}, "c1", acl.Publish, "a/b") {
		t.Fatal("the policy does not have the new rule")
	}
	if _, err := svc.RemoveIdentity(actx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if len(b.Policy.Rules()) != 0 {
		t.Fatalf("the removed identity's rules are still in force: %+v", b.Policy.Rules())
	}
}

// TestUserAdmin grants and takes back the console's admin role through the
// client (the API door), and checks the store, the list and the audit hook
// agree.
func TestUserAdmin(t *testing.T) {
	e := startEnv(t)
	ch, err := e.adm.AddUser(ctx(t), admin.UserRequest{User: "ops", Admin: true})
	if err != nil || !ch.User.Admin || ch.Password == "" {
		t.Fatalf("AddUser(admin) = %+v, %v", ch, err)
	}
	if _, err := e.adm.AddUser(ctx(t), admin.UserRequest{User: "dev"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, user string
		on         bool
		want       error
	}{
		{"grant", "dev", true, nil},
		{"take back", "ops", false, nil},
		{"unknown user", "ghost", true, store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := e.adm.SetUserAdmin(ctx(t), tc.user, admin.UserAdminRequest{Admin: tc.on})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("SetUserAdmin = %v, want %v", err, tc.want)
			}
			if err == nil && ch.User.Admin != tc.on {
				t.Fatalf("answer %+v, want admin %v", ch, tc.on)
			}
		})
	}
	users, err := e.adm.ListUsers(ctx(t))
	if err != nil || len(users) != 2 || users[0].ID != "dev" || !users[0].Admin || users[1].ID != "ops" || users[1].Admin {
		t.Fatalf("ListUsers = %+v, %v; want dev an admin, ops not", users, err)
	}
	// A body that is not {"admin": bool} is refused.
	if status, body := do(t, http.MethodPut, e.base+"/api/v1/admin/users/dev/admin", e.adminSecret, `{"admin":"yes"}`); status != http.StatusBadRequest {
		t.Fatalf("bad body: %d %s", status, body)
	}
}

func TestUserAdminAudited(t *testing.T) {
	b := testenv.StartBroker(t, testenv.WithoutIdentities())
	var got []admin.Change
	svc, err := admin.NewService(admin.Options{Store: b.Store, OnChange: func(c admin.Change) { got = append(got, c) }})
	if err != nil {
		t.Fatal(err)
	}
	actx := store.WithToken(ctx(t), store.Token{ID: "tb_00000000", UserID: "root", Scopes: []string{store.ScopeAdmin}}, "secret")
	if _, err := svc.AddUser(actx, admin.UserRequest{User: "ops", Password: "a-long-password"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetUserAdmin(actx, "ops", admin.UserAdminRequest{Admin: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetUserAdmin(actx, "ops", admin.UserAdminRequest{Admin: false}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Action != "user.admin.grant" || got[2].Action != "user.admin.revoke" ||
		got[1].Target != "user ops" || got[1].User != "root" || got[1].Err != nil {
		t.Fatalf("changes seen: %+v", got)
	}
}
