package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// storeCommands are the commands that open the store themselves when no
// --server is given, as `-h` reaches them.
var storeCommands = [][]string{
	{"init"},
	{"token", "create"}, {"token", "list"}, {"token", "revoke"},
	{"mqtt-user", "add"}, {"mqtt-user", "list"}, {"mqtt-user", "disable"}, {"mqtt-user", "enable"},
	{"mqtt-user", "passwd"}, {"mqtt-user", "remove"},
	{"user", "add"}, {"user", "list"}, {"user", "passwd"}, {"user", "remove"},
	{"acl", "rule", "list"}, {"acl", "rule", "add"}, {"acl", "rule", "remove"}, {"acl", "export"},
	{"agents", "grant"}, {"agents", "grants"}, {"agents", "limit"}, {"agents", "limits"}, {"audit"},
}

// Every command that opens the store itself takes --store-url beside
// --data-dir, and the usage no longer calls acl export --data-dir only.
func TestStoreCommandsTakeStoreURL(t *testing.T) {
	isolateEnv(t)
	for _, cmd := range storeCommands {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			out, _, err := runCLI(t, append(slices.Clone(cmd), "-h")...)
			if err != nil {
				t.Fatal(err)
			}
			for _, flag := range []string{"-data-dir", "-store-url"} {
				if !strings.Contains(out, flag) {
					t.Errorf("no %s in its flags:\n%s", flag, out)
				}
			}
		})
	}
	out, _, _ := runCLI(t, "--help")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  acl export ") && (strings.Contains(line, "--data-dir only") || !strings.Contains(line, "--store-url")) {
			t.Errorf("usage: %q, want it to name --store-url", line)
		}
	}
}

// pickStore keeps one way to the store: the command line's, else
// TOOLBUS_SERVER, then TOOLBUS_STORE_URL, then the data directory.
func TestPickStore(t *testing.T) {
	for _, tc := range []struct {
		name             string
		src              flagSources
		server, storeURL string // values after parsing
		wantServer       string
		wantURL          string
		wantErr          string
	}{
		{name: "defaults: the data directory", src: flagSources{}},
		{name: "env store URL", src: flagSources{"store-url": "env"}, storeURL: "postgres://db/t", wantURL: "postgres://db/t"},
		{name: "env server beats env store URL", src: flagSources{"server": "env", "store-url": "env"},
			server: "http://gw", storeURL: "postgres://db/t", wantServer: "http://gw"},
		{name: "--data-dir beats env store URL and server", src: flagSources{"data-dir": "flag", "server": "env", "store-url": "env"},
			server: "http://gw", storeURL: "postgres://db/t"},
		{name: "--store-url beats env server", src: flagSources{"store-url": "flag", "server": "env"},
			server: "http://gw", storeURL: "postgres://db/t", wantURL: "postgres://db/t"},
		{name: "--server beats env store URL", src: flagSources{"server": "flag", "store-url": "env"},
			server: "http://gw", storeURL: "postgres://db/t", wantServer: "http://gw"},
		{name: "two on the command line", src: flagSources{"store-url": "flag", "data-dir": "flag"},
			storeURL: "postgres://db/t", wantErr: "--store-url and --data-dir"},
		{name: "empty --store-url", src: flagSources{"store-url": "flag"}, wantErr: "TOOLBUS_STORE_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, storeURL := tc.server, tc.storeURL
			err := pickStore(tc.src, &server, &storeURL)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || server != tc.wantServer || storeURL != tc.wantURL {
				t.Errorf("server %q, store URL %q, err %v; want %q, %q", server, storeURL, err, tc.wantServer, tc.wantURL)
			}
		})
	}
}

// A PostgreSQL store is bootstrapped and run from the CLI alone, through
// --store-url and through TOOLBUS_STORE_URL: the tables, the gateways'
// broker identity, the first admin token, a user, a rule, the audit log.
func TestStoreCommandsOnPostgres(t *testing.T) {
	isolateEnv(t)
	storeURL := testenv.StartPostgres(t).CreateDatabase(t)
	if out := cli(t, "init", "--store-url", storeURL); !strings.Contains(out, "store ready in postgres://") {
		t.Fatalf("init: %q", out)
	}
	cli(t, "mqtt-user", "add", "--store-url", storeURL, "--username", "gw", "--role", "platform", "--generate-password")

	t.Setenv("TOOLBUS_STORE_URL", storeURL)
	secret := lastLine(cli(t, "token", "create", "--user", "root", "--scopes", "admin"))
	cli(t, "user", "add", "--user", "carol", "--generate-password")
	cli(t, "acl", "rule", "add", "--username", "gw", "--access", "read", "--filter", "sensors/#")
	if out := cli(t, "token", "list"); !strings.Contains(out, store.TokenIDOf(secret)) {
		t.Errorf("token list on TOOLBUS_STORE_URL misses the token:\n%s", out)
	}
	if out := cli(t, "audit", "--kind", "admin"); !strings.Contains(out, "token.create") {
		t.Errorf("audit on TOOLBUS_STORE_URL misses the CLI's change:\n%s", out)
	}

	st, err := store.OpenURL(t.Context(), storeURL, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if id, err := st.Identity(t.Context(), "gw"); err != nil || id.Role != acl.RolePlatform {
		t.Errorf("identity gw: %+v, %v", id, err)
	}
	if tok, err := st.AuthenticateToken(t.Context(), secret); err != nil || !slices.Contains(tok.Scopes, store.ScopeAdmin) {
		t.Errorf("the admin token does not authenticate: %+v, %v", tok, err)
	}

	// A data directory on the command line wins over the environment's
	// store URL, and is not created by a command that needs a store.
	missing := filepath.Join(t.TempDir(), "typo")
	if _, _, err := runCLI(t, "token", "list", "--data-dir", missing); err == nil || !strings.Contains(err.Error(), "no toolbus store") {
		t.Errorf("token list --data-dir with TOOLBUS_STORE_URL set: %v, want the data directory's missing-store error", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token list created %s", missing)
	}
}
