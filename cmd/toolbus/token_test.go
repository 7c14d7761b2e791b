package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/store"
)

var secretLineRE = regexp.MustCompile(`^tb_[0-9a-z]{8}_[A-Za-z0-9_-]{43}$`)

// isolateEnv keeps TOOLBUS_* variables of the machine out of the CLI under
// test (parseFlags reads them for every flag not given).
func isolateEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TOOLBUS_") {
			t.Setenv(k, "") // restores the value after the test
			os.Unsetenv(k)
		}
	}
}

// runCLI runs the toolbus command line with a deadline.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err = run(ctx, args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

// initStore runs `toolbus init` on dir (it is idempotent).
func initStore(t *testing.T, dir string) {
	t.Helper()
	if _, errOut, err := runCLI(t, "init", "--data-dir", dir); err != nil {
		t.Fatalf("init: %v\n%s", err, errOut)
	}
}

// createToken runs `token create` and returns the secret from the last line.
func createToken(t *testing.T, dir string, args ...string) (secret, stdout string) {
	t.Helper()
	initStore(t, dir)
	out, errOut, err := runCLI(t, append([]string{"token", "create", "--data-dir", dir}, args...)...)
	if err != nil {
		t.Fatalf("token create %v: %v\nstderr: %s", args, err, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	secret = lines[len(lines)-1]
	if !secretLineRE.MatchString(secret) {
		t.Fatalf("last line of token create is %q, want the secret alone; output:\n%s", secret, out)
	}
	if strings.Count(out, secret[len("tb_xxxxxxxx_"):]) != 1 {
		t.Fatalf("the secret appears more than once in the output:\n%s", out)
	}
	return secret, out
}

// authenticate checks secret against the store in dir, as the gateway would.
func authenticate(t *testing.T, dir, secret string) (store.Token, error) {
	t.Helper()
	s, err := store.Open(t.Context(), dir, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.AuthenticateToken(t.Context(), secret)
}

func TestTokenCreate(t *testing.T) {
	isolateEnv(t)
	for _, tc := range []struct {
		name         string
		args         []string
		wantScopes   []string
		wantReadOnly bool
		wantEntities []store.Entity
		wantExpiry   bool
		wantName     string
	}{
		{"defaults", []string{"--user", "alice"}, store.DefaultScopes, false, nil, false, ""},
		{"everything", []string{"--user", "bob", "--scopes", "tools:list, admin", "--read-only",
			"--entity", "repo/r1", "--entity", "doc/d1,doc/d2", "--ttl", "720h", "--name", "CI nightly"},
			[]string{"tools:list", "admin"}, true, []store.Entity{{Type: "repo", ID: "r1"}, {Type: "doc", ID: "d1"}, {Type: "doc", ID: "d2"}}, true, "CI nightly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			secret, out := createToken(t, dir, tc.args...)
			tok, err := authenticate(t, dir, secret)
			if err != nil {
				t.Fatalf("the printed token does not authenticate: %v", err)
			}
			if !strings.Contains(out, "created token "+tok.ID+" for user "+tok.UserID) {
				t.Errorf("summary does not name the token and user:\n%s", out)
			}
			if !slices.Equal(tok.Scopes, tc.wantScopes) || tok.ReadOnly != tc.wantReadOnly ||
				!slices.Equal(tok.Entities, tc.wantEntities) || tok.Name != tc.wantName {
				t.Errorf("token %+v does not match the flags %v", tok, tc.args)
			}
			if tc.wantExpiry != !tok.ExpiresAt.IsZero() {
				t.Errorf("ExpiresAt = %v, want set=%v", tok.ExpiresAt, tc.wantExpiry)
			}
			if tc.wantExpiry && tok.ExpiresAt.Sub(tok.Created) != 720*time.Hour {
				t.Errorf("ExpiresAt - Created = %v, want 720h", tok.ExpiresAt.Sub(tok.Created))
			}
		})
	}
}

func TestTokenCreateErrors(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	initStore(t, dir)
	for _, tc := range []struct {
		name string
		args []string
		want error // nil: any error
	}{
		{"no user", nil, nil},
		{"bad user", []string{"--user", "a/b"}, store.ErrInvalidTokenSpec},
		{"bad scope", []string{"--user", "alice", "--scopes", "Tools:list"}, store.ErrInvalidScope},
		{"empty scope in list", []string{"--user", "alice", "--scopes", "tools:list,,admin"}, store.ErrInvalidScope},
		{"bad entity", []string{"--user", "alice", "--entity", "repo"}, nil},
		{"plain endpoint entity", []string{"--user", "alice", "--entity", "_/_"}, store.ErrInvalidTokenSpec},
		{"negative ttl", []string{"--user", "alice", "--ttl", "-1h"}, store.ErrInvalidTokenSpec},
		{"unknown flag", []string{"--user", "alice", "--admin"}, nil},
		{"positional argument", []string{"--user", "alice", "extra"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCLI(t, append([]string{"token", "create", "--data-dir", dir}, tc.args...)...)
			if err == nil {
				t.Fatalf("token create %v succeeded:\n%s", tc.args, out)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("token create %v = %v, want %v", tc.args, err, tc.want)
			}
			if strings.Contains(out, "tb_") {
				t.Fatalf("a refused create printed a token:\n%s", out)
			}
		})
	}
	s, err := store.Open(t.Context(), dir, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if toks, err := s.ListTokens(t.Context(), ""); err != nil || len(toks) != 0 {
		t.Fatalf("refused creates left tokens: %v, %v", toks, err)
	}
}

func TestTokenListAndRevoke(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	aliceSecret, _ := createToken(t, dir, "--user", "alice", "--name", "laptop key")
	bobSecret, bobOut := createToken(t, dir, "--user", "bob", "--read-only", "--entity", "repo/r1", "--agents", "search,files", "--ttl", "1h")
	if !strings.Contains(bobOut, "  agents:    search,files\n") {
		t.Errorf("token create --agents does not say the agents:\n%s", bobOut)
	}
	alice, err := authenticate(t, dir, aliceSecret)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := authenticate(t, dir, bobSecret)
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, err := runCLI(t, "token", "revoke", "--data-dir", dir, "--id", bob.ID)
	if err != nil {
		t.Fatalf("token revoke: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "revoked token "+bob.ID) {
		t.Errorf("revoke output %q does not name the token", out)
	}
	if _, err := authenticate(t, dir, bobSecret); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("revoked token authenticates: %v", err)
	}
	if _, _, err := runCLI(t, "token", "revoke", "--data-dir", dir, "--id", bob.ID); err != nil {
		t.Fatalf("revoking twice: %v, want success", err)
	}

	t.Run("table", func(t *testing.T) {
		out, _, err := runCLI(t, "token", "list", "--data-dir", dir)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("want a header and two rows:\n%s", out)
		}
		if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"ID", "USER", "SCOPES", "READ-ONLY", "ENTITIES", "AGENTS", "EXPIRES", "LAST-USED", "REVOKED", "AUDIENCE", "CLIENT", "NAME"}) {
			t.Fatalf("header %q", lines[0])
		}
		rows := map[string][]string{}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			rows[f[0]] = f
		}
		a, b := rows[alice.ID], rows[bob.ID]
		if a == nil || b == nil {
			t.Fatalf("rows of %s and %s missing:\n%s", alice.ID, bob.ID, out)
		}
		if want := []string{alice.ID, "alice", "tools:list,tools:call", "false", "any", "any", "never"}; !slices.Equal(a[:7], want) {
			t.Errorf("alice row %v, want it to start with %v", a, want)
		}
		if strings.Join(a[11:], " ") != "laptop key" || a[8] != "-" {
			t.Errorf("alice row %v: want not revoked and named", a)
		}
		if b[1] != "bob" || b[3] != "true" || b[4] != "repo/r1" || b[5] != "search,files" || b[6] == "never" || b[8] == "-" {
			t.Errorf("bob row %v: want read-only, narrowed to an entity and two agents, expiring, revoked", b)
		}
		if strings.Contains(out, aliceSecret[12:]) || strings.Contains(out, bobSecret[12:]) {
			t.Fatal("list shows a secret")
		}
	})

	t.Run("json for one user", func(t *testing.T) {
		out, _, err := runCLI(t, "token", "list", "--data-dir", dir, "--user", "bob", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if len(got) != 1 {
			t.Fatalf("want bob's one token:\n%s", out)
		}
		j := got[0]
		if j["id"] != bob.ID || j["user"] != "bob" || j["readOnly"] != true || j["revokedAt"] == nil || j["expiresAt"] == nil {
			t.Errorf("JSON token %v", j)
		}
		if es, _ := j["entities"].([]any); len(es) != 1 || es[0].(map[string]any)["type"] != "repo" || es[0].(map[string]any)["id"] != "r1" {
			t.Errorf("entities %v, want [{type: repo, id: r1}]", j["entities"])
		}
		if _, ok := j["lastUsed"]; !ok {
			// authenticate() above used it and closed its store, which writes LastUsed.
			t.Errorf("lastUsed missing after a use: %v", j)
		}
	})

	t.Run("json of nobody is an empty list", func(t *testing.T) {
		out, _, err := runCLI(t, "token", "list", "--data-dir", dir, "--user", "nobody", "--json")
		if err != nil || strings.TrimSpace(out) != "[]" {
			t.Fatalf("got %q, %v; want []", out, err)
		}
	})
}

func TestTokenRevokeErrors(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	createToken(t, dir, "--user", "alice")
	if _, _, err := runCLI(t, "token", "revoke", "--data-dir", dir); err == nil {
		t.Error("revoke without --id succeeded")
	}
	if _, _, err := runCLI(t, "token", "revoke", "--data-dir", dir, "--id", "tb_00000000"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke of an unknown ID = %v, want ErrNotFound", err)
	}
}

// TestReadOnlyCommandsNeedExistingStore: a mistyped --data-dir fails the
// commands that only read or revoke, instead of creating an empty store
// (an ACL export from one would lock every identity out of Mosquitto).
func TestReadOnlyCommandsNeedExistingStore(t *testing.T) {
	isolateEnv(t)
	missing := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{
		{"token", "list", "--data-dir", missing},
		{"token", "revoke", "--data-dir", missing, "--id", "tb_00000000"},
		{"acl", "export", "--format", "mosquitto", "--data-dir", missing, "--out", filepath.Join(t.TempDir(), "out")},
	} {
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), "no toolbus store") {
			t.Errorf("%v = %v, want a missing-store error", args, err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only command created %s", missing)
	}
}

func TestTokenFlagsFromEnvironment(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	initStore(t, dir)
	t.Setenv("TOOLBUS_DATA_DIR", dir)
	t.Setenv("TOOLBUS_SCOPES", "tools:list")
	t.Setenv("TOOLBUS_ENTITY", "repo/r1,repo/r2")
	out, errOut, err := runCLI(t, "token", "create", "--user", "alice")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tok, err := authenticate(t, dir, lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tok.Scopes, []string{"tools:list"}) || len(tok.Entities) != 2 {
		t.Fatalf("token %+v: environment not applied", tok)
	}
	// A flag on the command line wins over the environment.
	out, _, err = runCLI(t, "token", "create", "--user", "bob", "--scopes", "admin")
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if tok, err := authenticate(t, dir, lines[len(lines)-1]); err != nil || !slices.Equal(tok.Scopes, []string{"admin"}) {
		t.Fatalf("token %+v, %v: want the flag's scopes", tok, err)
	}
}

func TestTokenCommandUsage(t *testing.T) {
	isolateEnv(t)
	out, _, err := runCLI(t, "help")
	if err != nil || !strings.Contains(out, "token create") || !strings.Contains(out, "token revoke") {
		t.Fatalf("usage does not list the token commands: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"token"}, {"token", "delete"}} {
		if _, _, err := runCLI(t, args...); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
	if out, _, err := runCLI(t, "token", "create", "-h"); err != nil || !strings.Contains(out, "-entity") {
		t.Errorf("token create -h = %v, help %q", err, out)
	}
}

// `agents grant` limits a user's tokens (in the store: a token made
// before follows), `agents grants` lists the limits, and --agents ""
// lifts one.
func TestAgentsGrant(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	secret, _ := createToken(t, dir, "--user", "alice")
	out, errOut, err := runCLI(t, "agents", "grant", "--data-dir", dir, "--user", "alice", "--agents", "search,files")
	if err != nil || !strings.Contains(out, "user alice may use: search,files") {
		t.Fatalf("agents grant: %v %q %q", err, out, errOut)
	}
	tok, err := authenticate(t, dir, secret)
	if err != nil || !slices.Equal(tok.Agents, []string{"files", "search"}) {
		t.Fatalf("alice's token after the grant: agents %v, %v", tok.Agents, err)
	}
	out, _, err = runCLI(t, "agents", "grants", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "alice") || !strings.Contains(out, "files,search") {
		t.Errorf("agents grants: %v\n%s", err, out)
	}
	if _, _, err := runCLI(t, "agents", "grant", "--data-dir", dir, "--user", "alice", "--agents", "a/b"); err == nil {
		t.Error("an agent name that is no topic level was granted")
	}
	if _, _, err := runCLI(t, "agents", "grant", "--data-dir", dir, "--user", "alice", "--agents", ""); err != nil {
		t.Fatal(err)
	}
	if tok, _ := authenticate(t, dir, secret); tok.Agents != nil {
		t.Errorf("after lifting the grant: agents %v, want every agent", tok.Agents)
	}
}

// `token revoke --id` takes the whole token too (what `token create`
// printed): its ID is its prefix.
func TestTokenRevokeWholeToken(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	secret, _ := createToken(t, dir, "--user", "alice")
	out, errOut, err := runCLI(t, "token", "revoke", "--data-dir", dir, "--id", secret)
	if err != nil {
		t.Fatalf("token revoke with the whole token: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "revoked token "+secret[:len("tb_xxxxxxxx")]+" ") || strings.Contains(out, secret) {
		t.Errorf("revoke output %q: want the token's ID, never the secret", out)
	}
	if _, err := authenticate(t, dir, secret); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("the token still authenticates: %v", err)
	}
}

// `mqtt-user add` generates a password only when asked (or on a terminal):
// an empty pipe is an error that says what to do, and adds nothing.
func TestMQTTUserAddEmptyStdin(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	createToken(t, dir, "--user", "alice") // makes the store
	for _, stdin := range []string{"", "\n"} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), []string{"mqtt-user", "add", "--data-dir", dir, "--username", "agent1", "--role", "expert-agent"},
			strings.NewReader(stdin), &out, &errOut)
		if !errors.Is(err, errNoPassword) {
			t.Errorf("stdin %q: err = %v, want errNoPassword", stdin, err)
		}
	}
	out, _, err := runCLI(t, "mqtt-user", "list", "--data-dir", dir)
	if err != nil || strings.Contains(out, "agent1") {
		t.Errorf("an identity was added after all: %v\n%s", err, out)
	}
	var out2, errOut bytes.Buffer
	if err := run(t.Context(), []string{"mqtt-user", "add", "--data-dir", dir, "--username", "agent1", "--role", "expert-agent"},
		strings.NewReader("a-long-enough-password\n"), &out2, &errOut); err != nil {
		t.Fatalf("password on stdin: %v\n%s", err, errOut.String())
	}
}

// A mistyped scope is refused, naming the valid ones, and mints nothing;
// `token create -h` lists them too.
func TestTokenCreateUnknownScope(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	createToken(t, dir, "--user", "alice")
	_, _, err := runCLI(t, "token", "create", "--data-dir", dir, "--user", "bob", "--scopes", "tool:call")
	if err == nil || !strings.Contains(err.Error(), `unknown scope "tool:call"`) || !strings.Contains(err.Error(), "tools:list, tools:call, admin, metrics") {
		t.Fatalf("token create --scopes tool:call: %v", err)
	}
	out, _, err := runCLI(t, "token", "list", "--data-dir", dir, "--user", "bob")
	if err != nil || strings.Contains(out, "bob") {
		t.Errorf("a token was minted for bob after all: %v\n%s", err, out)
	}
	if out, _, _ := runCLI(t, "token", "create", "-h"); !strings.Contains(out, "tools:list, tools:call, admin, metrics") {
		t.Errorf("token create -h does not list the scopes:\n%s", out)
	}
}

// Only serve and init create a store: a write command on a mistyped
// --data-dir fails, saying how to make one, and leaves nothing behind.
func TestWriteCommandsNeedAStore(t *testing.T) {
	isolateEnv(t)
	missing := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{
		{"token", "create", "--data-dir", missing, "--user", "alice"},
		{"mqtt-user", "add", "--data-dir", missing, "--username", "a1", "--role", "expert-agent", "--generate-password"},
		{"agents", "grant", "--data-dir", missing, "--user", "alice", "--agents", "x"},
	} {
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), "toolbus init --data-dir") {
			t.Errorf("%v: err = %v, want one naming toolbus init", args, err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a write command created %s (%v)", missing, err)
	}
	if out, _, err := runCLI(t, "init", "--data-dir", missing); err != nil || !strings.Contains(out, "store ready") {
		t.Fatalf("init: %v %q", err, out)
	}
	createToken(t, missing, "--user", "alice")
}

// What mqtt-user says of the identity's connected clients: through a
// gateway with an external broker, the way to apply the change there.
func TestDisconnectNote(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		ch                    admin.IdentityChange
		disconnecting, remote bool
		want                  string
	}{
		{"nothing to disconnect", admin.IdentityChange{}, false, true, ""},
		{"embedded broker, live", admin.IdentityChange{Live: true, Disconnected: 2}, true, true, "disconnected 2 client(s)"},
		{"external broker, through --server", admin.IdentityChange{}, true, true, "run toolbus acl export"},
		{"on the data dir", admin.IdentityChange{}, true, false, "use --server for a live change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := disconnectNote(tc.ch, tc.disconnecting, tc.remote)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("note %q, want one with %q", got, tc.want)
			}
		})
	}
}
