package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/store"
)

func TestACLExport(t *testing.T) {
	isolateEnv(t)
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "mosquitto")
	st, err := store.Open(t.Context(), dir, store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]acl.Role{"gw": acl.RolePlatform, "agent1": acl.RoleExpertAgent, "old": acl.RoleExpertAgent} {
		if _, err := st.AddIdentity(t.Context(), name, role, []byte("password-123456")); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetDisabled(t.Context(), "old", true); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// --format defaults to mosquitto.
	stdout, stderr, err := runCLI(t, "acl", "export", "--data-dir", dir, "--out", out)
	if err != nil {
		t.Fatalf("acl export: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "include_dir "+out+"\n") {
		t.Errorf("stdout %q does not say how to include the settings", stdout)
	}
	conf, err := os.ReadFile(filepath.Join(out, "toolbus.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nset_tcp_nodelay true\n", "\nallow_anonymous false\n",
		"\npassword_file " + filepath.Join(out, "passwords") + "\n", "\nacl_file " + filepath.Join(out, "acl") + "\n"} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("toolbus.conf lacks %q:\n%s", want, conf)
		}
	}
	pw, err := os.ReadFile(filepath.Join(out, "passwords"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(pw)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "agent1:$7$1000$") || !strings.HasPrefix(lines[1], "gw:$7$1000$") {
		t.Errorf("passwords:\n%s", pw)
	}
	if fi, err := os.Stat(filepath.Join(out, "passwords")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("passwords mode: %v %v, want 0600", fi.Mode(), err)
	}
	aclFile, err := os.ReadFile(filepath.Join(out, "acl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nuser gw\n", "\nuser agent1\n", "topic read ff/v2/mcp/agent1/+/+/+/+/+/+/req\n"} {
		if !strings.Contains(string(aclFile), want) {
			t.Errorf("acl lacks %q:\n%s", want, aclFile)
		}
	}
	if strings.Contains(string(aclFile), "user old") {
		t.Errorf("acl has the disabled identity:\n%s", aclFile)
	}

	for _, args := range [][]string{
		{"acl", "export", "--format", "emqx", "--data-dir", dir, "--out", out},
		{"acl", "export", "--data-dir", dir, "--out", filepath.Join(t.TempDir(), "a b")},
		{"acl", "export", "--format", "mosquitto", "--data-dir", dir},
	} {
		if _, _, err := runCLI(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// acl export --format nats writes the accounts file, readable by its owner
// only, with each identity's bcrypt hash; one whose password predates the
// bcrypt hashes is left out, and named.
func TestACLExportNATS(t *testing.T) {
	isolateEnv(t)
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "nats dir") // NATS reads a path with spaces
	for cost, name := range map[int]string{bcrypt.MinCost: "gw", -1: "old"} {
		st, err := store.Open(t.Context(), dir, store.StoreOptions{HashIterations: 1000, BcryptCost: cost})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddIdentity(t.Context(), name, acl.RolePlatform, []byte("password-123456")); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	stdout, stderr, err := runCLI(t, "acl", "export", "--format", "nats", "--data-dir", dir, "--out", out)
	if err != nil {
		t.Fatalf("acl export: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "include "+acl.NATSConfName) {
		t.Errorf("stdout %q does not say how to include the file", stdout)
	}
	if !strings.Contains(stderr, "identity old: no bcrypt hash") {
		t.Errorf("stderr %q does not name the identity left out", stderr)
	}
	path := filepath.Join(out, acl.NATSConfName)
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "user: \"gw\"\n        password: \"$2a$04$") || strings.Contains(string(conf), `"old"`) {
		t.Errorf("%s:\n%s", acl.NATSConfName, conf)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode: %v %v, want 0600", acl.NATSConfName, fi.Mode(), err)
	}
}

// acl export takes no --server, and says why, instead of "flag provided
// but not defined".
func TestACLExportRefusesServer(t *testing.T) {
	isolateEnv(t)
	_, _, err := runCLI(t, "acl", "export", "--server", "http://127.0.0.1:8080", "--out", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "never leave the store through the admin API") {
		t.Errorf("acl export --server = %v, want a refusal that says why", err)
	}
}

// parseProcStatus takes a process's effective user and every group it is
// in, and only for the process named.
func TestParseProcStatus(t *testing.T) {
	status := []byte("Name:\tmosquitto\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t0\t107\t107\t107\nGid:\t0\t113\t113\t113\nGroups:\t113 4 \n")
	p, ok := parseProcStatus(status, "mosquitto")
	if !ok || p.uid != 107 || !slices.Equal(p.gids, []int{113, 113, 4}) {
		t.Errorf("parseProcStatus = %+v %t, want uid 107, groups 113 and 4", p, ok)
	}
	if _, ok := parseProcStatus(status, "nats-server"); ok {
		t.Error("parseProcStatus took a process of another name")
	}
}

// --owner takes names and numbers, and refuses a user or group that does
// not exist.
func TestParseOwner(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    *acl.FileOwner
		wantErr bool
	}{
		{in: ""},
		{in: "root", want: &acl.FileOwner{UID: 0, GID: 0}},
		{in: "0:0", want: &acl.FileOwner{UID: 0, GID: 0}},
		{in: "root:65534", want: &acl.FileOwner{UID: 0, GID: 65534}},
		{in: "no-such-user-here", wantErr: true},
		{in: "root:no-such-group-here", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseOwner(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseOwner(%q) = %v", tc.in, err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("parseOwner(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
