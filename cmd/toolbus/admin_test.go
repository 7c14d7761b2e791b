package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// startToolbus runs a toolbus on free loopback ports over dir and returns
// its URL and a token with the admin scope.
func startToolbus(t *testing.T, dir string) (url, adminToken string) {
	t.Helper()
	srv := servertest.Start(t, server.Config{DataDir: dir})
	secret := servertest.Token(t, srv, store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin, store.ScopeToolsList}})
	return "http://" + srv.HTTPAddr().String(), secret
}

// cli runs one command line and fails the test if it fails.
func cli(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("toolbus %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestOperatorCommandsBothDoors runs each operator command through the API of
// a live server and directly on a data directory, and checks that both give
// the same answers.
func TestOperatorCommandsBothDoors(t *testing.T) {
	isolateEnv(t)
	liveDir, offDir := t.TempDir(), t.TempDir()
	url, tok := startToolbus(t, liveDir)
	initStore(t, offDir)
	doors := []struct {
		name string
		args []string
	}{
		{"server", []string{"--server", url, "--token", tok}},
		{"data-dir", []string{"--data-dir", offDir}},
	}
	jsonOf := map[string]map[string]string{} // door -> command -> normalised JSON
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			with := func(args ...string) []string { return append(args, d.args...) }
			jsonOf[d.name] = map[string]string{}

			out := cli(t, with("mqtt-user", "add", "--username", "dev1", "--role", "client", "--generate-password")...)
			if !strings.Contains(out, "added MQTT identity dev1 (role client)") || len(lastLine(out)) < admin.MinPasswordLen {
				t.Fatalf("mqtt-user add:\n%s", out)
			}
			out = cli(t, with("mqtt-user", "disable", "--username", "dev1")...)
			if d.name == "server" && !strings.Contains(out, "disabled MQTT identity dev1; disconnected 0 client(s)") ||
				d.name == "data-dir" && !strings.Contains(out, "use --server for a live change") {
				t.Errorf("mqtt-user disable:\n%s", out)
			}
			cli(t, with("mqtt-user", "enable", "--username", "dev1")...)
			out = cli(t, with("mqtt-user", "passwd", "--username", "dev1", "--generate-password")...)
			if !strings.Contains(out, "changed the password of MQTT identity dev1") || len(lastLine(out)) < admin.MinPasswordLen {
				t.Errorf("mqtt-user passwd:\n%s", out)
			}
			out = cli(t, with("mqtt-user", "list")...)
			if !strings.HasPrefix(out, "USERNAME") || !strings.Contains(out, "dev1") {
				t.Errorf("mqtt-user list:\n%s", out)
			}
			jsonOf[d.name]["identities"] = normalised(t, cli(t, with("mqtt-user", "list", "--json")...), "created")

			out = cli(t, with("acl", "rule", "add", "--username", "dev1", "--access", "readwrite", "--filter", "sensors/#")...)
			if !strings.HasPrefix(out, "added rule 1: dev1 readwrite sensors/#") {
				t.Errorf("acl rule add:\n%s", out)
			}
			cli(t, with("acl", "rule", "add", "--everyone", "--access", "read", "--filter", "news/+")...)
			out = cli(t, with("acl", "rule", "list")...)
			for _, want := range []string{"builtin-agent-req", "role:expert-agent", "built-in, read-only", "dev1", "news/+"} {
				if !strings.Contains(out, want) {
					t.Errorf("acl rule list lacks %q:\n%s", want, out)
				}
			}
			if _, _, err := runCLI(t, with("acl", "rule", "remove", "--id", "builtin-agent-req")...); !errors.Is(err, admin.ErrBuiltinRule) ||
				!strings.Contains(err.Error(), "cannot be removed") {
				t.Errorf("removing a built-in rule: %v", err)
			}
			if _, _, err := runCLI(t, with("acl", "rule", "add", "--access", "read", "--filter", "x")...); err == nil {
				t.Error("acl rule add without --username or --everyone succeeded")
			}
			cli(t, with("acl", "rule", "remove", "--id", "2")...)
			jsonOf[d.name]["rules"] = normalised(t, cli(t, with("acl", "rule", "list", "--json")...), "created")

			secret := lastLine(cli(t, with("token", "create", "--user", "bob", "--scopes", "tools:list", "--name", "bob key")...))
			if !secretLineRE.MatchString(secret) {
				t.Fatalf("token create: last line %q", secret)
			}
			var toks []admin.Token
			if err := json.Unmarshal([]byte(cli(t, with("token", "list", "--user", "bob", "--json")...)), &toks); err != nil ||
				len(toks) != 1 || !strings.HasPrefix(secret, toks[0].ID+"_") || toks[0].Name != "bob key" {
				t.Fatalf("token list --json = %+v, %v", toks, err)
			}
			cli(t, with("token", "revoke", "--id", toks[0].ID)...)

			out = cli(t, with("mqtt-user", "remove", "--username", "dev1")...)
			if !strings.Contains(out, "removed MQTT identity dev1") {
				t.Errorf("mqtt-user remove:\n%s", out)
			}
			if _, _, err := runCLI(t, with("mqtt-user", "remove", "--username", "dev1")...); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("removing twice: %v, want ErrNotFound", err)
			}
		})
	}
	for what, live := range jsonOf["server"] {
		if off := jsonOf["data-dir"][what]; off != live {
			t.Errorf("%s --json differs between the doors:\nserver:   %s\ndata-dir: %s", what, live, off)
		}
	}
}

// normalised re-encodes a JSON list without the given per-item fields
// (times, which differ between two stores).
func normalised(t *testing.T, s string, drop ...string) string {
	t.Helper()
	var items []map[string]any
	if err := json.Unmarshal([]byte(s), &items); err != nil {
		t.Fatalf("not a JSON list: %v\n%s", err, s)
	}
	for _, it := range items {
		for _, k := range drop {
			delete(it, k)
		}
	}
	b, _ := json.Marshal(items)
	return string(b)
}

func TestLiveCommands(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	url, tok := startToolbus(t, dir)
	t.Setenv("TOOLBUS_SERVER", url)
	t.Setenv("TOOLBUS_TOKEN", tok)

	out := cli(t, "clients")
	if !strings.HasPrefix(out, "CLIENT-ID") {
		t.Errorf("clients:\n%s", out)
	}
	if again := cli(t, "clients", "list"); again != out {
		t.Errorf("clients list differs from clients:\n%s", again)
	}
	if !strings.HasPrefix(cli(t, "agents", "list"), "AGENT") {
		t.Error("agents list has no header")
	}
	if strings.TrimSpace(cli(t, "clients", "--json")) != "[]" {
		t.Error("clients --json of an idle broker is not []")
	}
	var ag admin.Agents
	if err := json.Unmarshal([]byte(cli(t, "agents", "--json")), &ag); err != nil || len(ag.Agents) != 0 || ag.ToolsError == "" {
		t.Errorf("agents --json = %+v, %v; want none, and a tools error", ag, err)
	}
	if !strings.HasPrefix(cli(t, "contexts", "list"), "CONTEXT") {
		t.Error("contexts list has no header")
	}
	if _, _, err := runCLI(t, "contexts", "evict", "--context", "gw/u/s/_/_"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("evicting an unknown context: %v, want ErrNotFound", err)
	}

	// --data-dir on the command line wins over TOOLBUS_SERVER, and these
	// commands need a server.
	for _, args := range [][]string{{"clients"}, {"agents"}, {"contexts", "list"}, {"contexts", "evict", "--context", "a/b/c/d/e"}} {
		_, _, err := runCLI(t, append(args, "--data-dir", dir)...)
		if err == nil || !strings.Contains(err.Error(), "--server") {
			t.Errorf("%v on a data directory: %v, want an error that asks for --server", args, err)
		}
	}
	if _, _, err := runCLI(t, "clients", "--server", url, "--data-dir", dir); err == nil {
		t.Error("--server and --data-dir together were accepted")
	}
	t.Setenv("TOOLBUS_TOKEN", "")
	if _, _, err := runCLI(t, "clients"); err == nil || !strings.Contains(err.Error(), "--token") {
		t.Errorf("--server without a token: %v", err)
	}
	if _, _, err := runCLI(t, "clients", "--token", "tb_00000000_"+strings.Repeat("A", 43)); !errors.Is(err, admin.ErrUnauthenticated) {
		t.Errorf("a bad token: %v, want ErrUnauthenticated", err)
	}
}
