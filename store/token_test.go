package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
)

var secretRE = regexp.MustCompile(`^tb_[0-9a-z]{8}_[A-Za-z0-9_-]{43}$`)

func createTestToken(t *testing.T, s *Store, spec TokenSpec) (string, Token) {
	t.Helper()
	secret, tok, err := s.CreateToken(testContext(t), spec)
	if err != nil {
		t.Fatalf("CreateToken(%+v): %v", spec, err)
	}
	return secret, tok
}

func TestCreateToken(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	for _, tc := range []struct {
		name         string
		spec         TokenSpec
		wantScopes   []string
		wantEntities []Entity
		wantExpiry   bool
	}{
		{"defaults", TokenSpec{UserID: "alice"}, DefaultScopes, nil, false},
		{"scopes kept in order, duplicates dropped",
			TokenSpec{UserID: "alice", Scopes: []string{"admin", "tools:list", "admin", "billing.read:x-1"}},
			[]string{"admin", "tools:list", "billing.read:x-1"}, nil, false},
		{"read-only", TokenSpec{UserID: "bob", ReadOnly: true}, DefaultScopes, nil, false},
		{"narrowed", TokenSpec{UserID: "bob", Entities: []Entity{{"repo", "r1"}, {"repo", "r2"}, {"repo", "r1"}}},
			DefaultScopes, []Entity{{"repo", "r1"}, {"repo", "r2"}}, false},
		{"ttl and name", TokenSpec{UserID: "carol", TTL: time.Hour, Name: "CI pipeline – nightly"}, DefaultScopes, nil, true},
		{"longest scope", TokenSpec{UserID: "carol", Scopes: []string{"a" + strings.Repeat("z", 63)}},
			[]string{"a" + strings.Repeat("z", 63)}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret, tok, err := s.CreateToken(ctx, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if !secretRE.MatchString(secret) {
				t.Fatalf("secret %q does not have the documented shape", secret)
			}
			if !strings.HasPrefix(secret, tok.ID+"_") || !contract.ValidLevel(tok.ID) {
				t.Fatalf("ID %q: want a valid level that prefixes the secret %q", tok.ID, secret)
			}
			if tok.UserID != tc.spec.UserID || tok.ReadOnly != tc.spec.ReadOnly || tok.Name != tc.spec.Name {
				t.Fatalf("token %+v does not reflect spec %+v", tok, tc.spec)
			}
			if !slices.Equal(tok.Scopes, tc.wantScopes) || !slices.Equal(tok.Entities, tc.wantEntities) {
				t.Fatalf("scopes %v entities %v; want %v %v", tok.Scopes, tok.Entities, tc.wantScopes, tc.wantEntities)
			}
			if tok.Created.IsZero() || !tok.LastUsed.IsZero() || !tok.RevokedAt.IsZero() {
				t.Fatalf("times of a new token: %+v", tok)
			}
			if got := !tok.ExpiresAt.IsZero(); got != tc.wantExpiry {
				t.Fatalf("ExpiresAt %v, want set=%v", tok.ExpiresAt, tc.wantExpiry)
			}
			if tc.wantExpiry && !tok.ExpiresAt.Equal(tok.Created.Add(tc.spec.TTL)) {
				t.Fatalf("ExpiresAt %v, want Created+TTL %v", tok.ExpiresAt, tok.Created.Add(tc.spec.TTL))
			}

			// What is stored is the hash of the whole secret, never the secret.
			var hash string
			if err := s.db.QueryRowContext(ctx, `SELECT secret_hash FROM tokens WHERE id = $1`, tok.ID).Scan(&hash); err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256([]byte(secret)); hash != hex.EncodeToString(sum[:]) {
				t.Fatalf("stored hash %s is not SHA-256 of the secret", hash)
			}
			var n int
			if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens WHERE instr(id || secret_hash || scopes || entities || name, $1) > 0`,
				secret[len(tok.ID)+1:]).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatal("the secret's random part is stored in the database")
			}

			got, err := s.AuthenticateToken(ctx, secret)
			if err != nil {
				t.Fatalf("AuthenticateToken of a new token: %v", err)
			}
			got.LastUsed = time.Time{}
			if !tokensEqual(got, tok) {
				t.Fatalf("AuthenticateToken = %+v, want %+v", got, tok)
			}
		})
	}

	t.Run("the default scopes are not shared", func(t *testing.T) {
		_, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
		tok.Scopes[0] = "changed"
		if DefaultScopes[0] != ScopeToolsList {
			t.Fatal("changing a token's scopes changed DefaultScopes")
		}
	})
}

func TestCreateTokenInvalid(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "s" + strings.Repeat("x", i)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		spec TokenSpec
	}{
		{"no user", TokenSpec{}},
		{"user with a slash", TokenSpec{UserID: "a/b"}},
		{"user with a wildcard", TokenSpec{UserID: "+"}},
		{"user too long", TokenSpec{UserID: strings.Repeat("u", contract.MaxLevelLen+1)}},
		{"empty scope list", TokenSpec{UserID: "alice", Scopes: []string{}}},
		{"empty scope", TokenSpec{UserID: "alice", Scopes: []string{""}}},
		{"scope with upper case", TokenSpec{UserID: "alice", Scopes: []string{"Tools:list"}}},
		{"scope starting with a digit", TokenSpec{UserID: "alice", Scopes: []string{"1tools"}}},
		{"scope with a space", TokenSpec{UserID: "alice", Scopes: []string{"tools list"}}},
		{"scope with a comma", TokenSpec{UserID: "alice", Scopes: []string{"a,b"}}},
		{"scope too long", TokenSpec{UserID: "alice", Scopes: []string{"a" + strings.Repeat("z", 64)}}},
		{"too many scopes", TokenSpec{UserID: "alice", Scopes: many(MaxTokenScopes + 1)}},
		{"entity type with a slash", TokenSpec{UserID: "alice", Entities: []Entity{{"a/b", "c"}}}},
		{"entity id empty", TokenSpec{UserID: "alice", Entities: []Entity{{"repo", ""}}}},
		{"entity id with #", TokenSpec{UserID: "alice", Entities: []Entity{{"repo", "#"}}}},
		{"plain endpoint entity", TokenSpec{UserID: "alice", Entities: []Entity{PlainEntity}}},
		{"entity type _", TokenSpec{UserID: "alice", Entities: []Entity{{"_", "x"}}}},
		{"entity id _", TokenSpec{UserID: "alice", Entities: []Entity{{"repo", "_"}}}},
		{"too many entities", TokenSpec{UserID: "alice", Entities: make([]Entity, MaxTokenEntities+1)}},
		{"negative ttl", TokenSpec{UserID: "alice", TTL: -time.Second}},
		{"name with a newline", TokenSpec{UserID: "alice", Name: "a\nb"}},
		{"name with a tab", TokenSpec{UserID: "alice", Name: "a\tb"}},
		{"name not UTF-8", TokenSpec{UserID: "alice", Name: "a\xffb"}},
		{"name too long", TokenSpec{UserID: "alice", Name: strings.Repeat("n", MaxTokenNameLen+1)}},
		{"agent with a slash", TokenSpec{UserID: "alice", Agents: []string{"a/b"}}},
		{"agent empty", TokenSpec{UserID: "alice", Agents: []string{""}}},
		{"agent with a space", TokenSpec{UserID: "alice", Agents: []string{"a b"}}},
		{"too many agents", TokenSpec{UserID: "alice", Agents: many(MaxTokenAgents + 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret, tok, err := s.CreateToken(ctx, tc.spec)
			if !errors.Is(err, ErrInvalidTokenSpec) {
				t.Fatalf("CreateToken = %q, %+v, %v; want ErrInvalidTokenSpec", secret, tok, err)
			}
		})
	}
	if toks, err := s.ListTokens(ctx, ""); err != nil || len(toks) != 0 {
		t.Fatalf("ListTokens after refused specs = %v, %v; want none", toks, err)
	}
}

func TestValidateScope(t *testing.T) {
	for _, s := range []string{ScopeToolsList, ScopeToolsCall, ScopeAdmin, "a", "x.y:z_w-1"} {
		if err := ValidateScope(s); err != nil {
			t.Errorf("ValidateScope(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "A", "-a", "a b", "a/b", "é", "a" + strings.Repeat("b", 64)} {
		if err := ValidateScope(s); !errors.Is(err, ErrInvalidScope) {
			t.Errorf("ValidateScope(%q) = %v, want ErrInvalidScope", s, err)
		}
	}
}

func TestParseEntity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Entity
		ok   bool
	}{
		{"repo/r1", Entity{"repo", "r1"}, true},
		{"_/_", PlainEntity, true},
		{"repo", Entity{}, false},
		{"repo/", Entity{}, false},
		{"/r1", Entity{}, false},
		{"repo/r1/x", Entity{}, false},
		{"re po/r1", Entity{}, false},
		{"repo/+", Entity{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseEntity(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("ParseEntity(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, contract.ErrInvalidLevel) {
				t.Fatalf("ParseEntity(%q) error %v does not wrap contract.ErrInvalidLevel", tc.in, err)
			}
			if err == nil && got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestTokenHasScope(t *testing.T) {
	tok := Token{Scopes: []string{ScopeToolsList, "billing.read"}}
	for _, tc := range []struct {
		scope string
		want  bool
	}{
		{ScopeToolsList, true},
		{"billing.read", true},
		{ScopeToolsCall, false},
		{ScopeAdmin, false},
		{"billing", false},
		{"", false},
	} {
		if got := tok.HasScope(tc.scope); got != tc.want {
			t.Errorf("HasScope(%q) = %v, want %v", tc.scope, got, tc.want)
		}
	}
	admin := Token{Scopes: []string{ScopeAdmin}}
	if admin.HasScope(ScopeToolsCall) {
		t.Error("admin implies tools:call; scopes must not imply one another")
	}
}

// A token limited to agents keeps the list through the store (each agent
// once) and allows only them; one without a list allows every agent.
func TestTokenAgents(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice", Agents: []string{"search", "files", "search"}})
	if !slices.Equal(tok.Agents, []string{"search", "files"}) {
		t.Fatalf("created with agents %v", tok.Agents)
	}
	got, err := s.AuthenticateToken(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := s.ListTokens(ctx, "alice")
	if err != nil || len(listed) != 1 {
		t.Fatalf("ListTokens = %v, %v", listed, err)
	}
	for _, tk := range []Token{got, listed[0]} {
		if !slices.Equal(tk.Agents, []string{"search", "files"}) || !tk.AllowsAgent("files") || tk.AllowsAgent("web") {
			t.Errorf("stored token: agents %v", tk.Agents)
		}
	}
	_, open := createTestToken(t, s, TokenSpec{UserID: "bob"})
	if open.Agents != nil || !open.AllowsAgent("web") {
		t.Errorf("a token without agents: %v, allows web %v", open.Agents, open.AllowsAgent("web"))
	}
}

func TestTokenAllowsEntity(t *testing.T) {
	open := Token{}
	narrowed := Token{Entities: []Entity{{"repo", "r1"}, {"doc", "d9"}}}
	for _, tc := range []struct {
		name string
		tok  Token
		e    Entity
		want bool
	}{
		{"open: plain endpoint", open, PlainEntity, true},
		{"open: any entity", open, Entity{"repo", "r7"}, true},
		{"narrowed: listed", narrowed, Entity{"repo", "r1"}, true},
		{"narrowed: second listed", narrowed, Entity{"doc", "d9"}, true},
		{"narrowed: other id", narrowed, Entity{"repo", "r2"}, false},
		{"narrowed: swapped", narrowed, Entity{"r1", "repo"}, false},
		{"narrowed: type only", narrowed, Entity{"repo", "d9"}, false},
		{"narrowed: plain endpoint", narrowed, PlainEntity, false},
		{"narrowed to _/_ still refuses the plain endpoint", Token{Entities: []Entity{PlainEntity}}, PlainEntity, false},
		{"narrowed: empty entity", narrowed, Entity{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tok.AllowsEntity(tc.e); got != tc.want {
				t.Fatalf("AllowsEntity(%+v) = %v, want %v", tc.e, got, tc.want)
			}
		})
	}
}

func TestListTokens(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	_, a1 := createTestToken(t, s, TokenSpec{UserID: "alice", Name: "first"})
	_, b1 := createTestToken(t, s, TokenSpec{UserID: "bob", ReadOnly: true, Entities: []Entity{{"repo", "r1"}},
		Scopes: []string{ScopeToolsList}, TTL: time.Hour})
	_, a2 := createTestToken(t, s, TokenSpec{UserID: "alice", Name: "second"})
	if err := s.RevokeToken(ctx, a2.ID); err != nil {
		t.Fatal(err)
	}

	all, err := s.ListTokens(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("ListTokens(\"\") = %d tokens, want 3", len(all))
	}
	byID := map[string]Token{}
	for _, tok := range all {
		byID[tok.ID] = tok
	}
	for _, want := range []Token{a1, b1} {
		if got := byID[want.ID]; !tokensEqual(got, want) {
			t.Errorf("listed %+v, want %+v", got, want)
		}
	}
	if byID[a2.ID].RevokedAt.IsZero() {
		t.Errorf("revoked token listed without RevokedAt: %+v", byID[a2.ID])
	}

	alice, err := s.ListTokens(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(alice) != 2 || alice[0].UserID != "alice" || alice[1].UserID != "alice" {
		t.Fatalf("ListTokens(alice) = %+v", alice)
	}
	if none, err := s.ListTokens(ctx, "nobody"); err != nil || len(none) != 0 {
		t.Fatalf("ListTokens(nobody) = %v, %v; want none", none, err)
	}
}

func TestRevokeToken(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	_, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})

	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	first := listOne(t, s, tok.ID).RevokedAt
	if first.IsZero() {
		t.Fatal("RevokedAt not set")
	}
	// Idempotent: no error, and the first revocation time stays.
	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatalf("second RevokeToken = %v, want nil", err)
	}
	if again := listOne(t, s, tok.ID).RevokedAt; !again.Equal(first) {
		t.Fatalf("second RevokeToken moved RevokedAt from %v to %v", first, again)
	}
	for _, id := range []string{"tb_00000000", "", "tb_", "nope", tok.ID + "x", strings.ToUpper(tok.ID)} {
		if err := s.RevokeToken(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("RevokeToken(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestTokenMigrationOnVersion1Database(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	s := openTestStoreIn(t, dir, StoreOptions{})
	addTestIdentity(t, s, "alice", acl.RoleClient, "alice-password")
	// Turn the database back into what a version-1 toolbus left.
	// Every step after 1 goes, or the store would see a newer version.
	for _, q := range []string{`DROP TABLE tokens`, `DROP TABLE IF EXISTS audit_segments`, `DROP TABLE IF EXISTS ended_sessions`, `DROP TABLE IF EXISTS user_agents`,
		`DROP TABLE IF EXISTS users`, `DROP TABLE IF EXISTS oauth_clients`, `DROP TABLE IF EXISTS oauth_codes`, `DROP TABLE IF EXISTS oauth_grants`, `DROP TABLE IF EXISTS oauth_pending`,
		`ALTER TABLE identities DROP COLUMN bcrypt_hash`,
		`DELETE FROM schema_migrations WHERE version >= 2`} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openTestStoreIn(t, dir, StoreOptions{})
	secret, _ := createTestToken(t, s2, TokenSpec{UserID: "alice"})
	if _, err := s2.AuthenticateToken(ctx, secret); err != nil {
		t.Fatalf("token on a migrated database: %v", err)
	}
	if _, err := s2.Identity(ctx, "alice"); err != nil {
		t.Fatalf("identity lost in the migration: %v", err)
	}
}

func listOne(t *testing.T, s *Store, id string) Token {
	t.Helper()
	toks, err := s.ListTokens(testContext(t), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks {
		if tok.ID == id {
			return tok
		}
	}
	t.Fatalf("token %s not listed", id)
	return Token{}
}

// tokensEqual compares tokens field by field (times with Equal, nil and
// empty slices alike).
func tokensEqual(a, b Token) bool {
	return a.ID == b.ID && a.UserID == b.UserID && slices.Equal(a.Scopes, b.Scopes) && a.ReadOnly == b.ReadOnly &&
		slices.Equal(a.Entities, b.Entities) && a.Name == b.Name && a.Created.Equal(b.Created) &&
		a.ExpiresAt.Equal(b.ExpiresAt) && a.LastUsed.Equal(b.LastUsed) && a.RevokedAt.Equal(b.RevokedAt)
}

// A user's agent grants narrow every token of theirs at once: a token
// without its own list gets the grants, one with a list keeps what both
// allow (possibly nothing), and no grants means every agent again.
func TestUserAgents(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	open, _ := createTestToken(t, s, TokenSpec{UserID: "alice"})
	own, _ := createTestToken(t, s, TokenSpec{UserID: "alice", Agents: []string{"search", "files"}})
	narrow, _ := createTestToken(t, s, TokenSpec{UserID: "alice", Agents: []string{"search"}})
	other, _ := createTestToken(t, s, TokenSpec{UserID: "bob"})
	agentsOf := func(secret string) []string {
		t.Helper()
		tok, err := s.AuthenticateToken(ctx, secret) // right after a write: not a stale cache entry
		if err != nil {
			t.Fatal(err)
		}
		return tok.Agents
	}
	if err := s.SetUserAgents(ctx, "alice", []string{"files", "web", "files"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.UserAgents(ctx, "alice"); err != nil || !slices.Equal(got, []string{"files", "web"}) {
		t.Fatalf("UserAgents = %v, %v", got, err)
	}
	for _, tc := range []struct {
		name, secret string
		want         []string
	}{
		{"no list of its own", open, []string{"files", "web"}},
		{"a list of its own", own, []string{"files"}},
		{"nothing in common", narrow, []string{}},
		{"another user", other, nil},
	} {
		if got := agentsOf(tc.secret); !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("%s: agents %#v, want %#v", tc.name, got, tc.want)
		}
	}
	if tok, _ := s.AuthenticateToken(ctx, narrow); tok.AllowsAgent("search") || tok.AllowsAgent("web") {
		t.Error("a token whose list and grants share nothing allows an agent")
	}
	if all, err := s.ListUserAgents(ctx); err != nil || len(all) != 1 || !slices.Equal(all["alice"], []string{"files", "web"}) {
		t.Errorf("ListUserAgents = %v, %v", all, err)
	}
	if err := s.SetUserAgents(ctx, "alice", nil); err != nil {
		t.Fatal(err)
	}
	if got := agentsOf(open); got != nil {
		t.Errorf("after the grants went: %v, want every agent", got)
	}
	for _, bad := range [][]string{{"a/b"}, {""}, {"+"}} {
		if err := s.SetUserAgents(ctx, "alice", bad); !errors.Is(err, ErrInvalidTokenSpec) {
			t.Errorf("SetUserAgents(%q) = %v, want ErrInvalidTokenSpec", bad, err)
		}
	}
}
