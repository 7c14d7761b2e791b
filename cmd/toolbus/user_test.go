package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/store"
)

// TestUserCommands: user add, list, passwd and remove through both doors;
// the password printed is the one that signs in, and remove revokes the
// user's tokens.
func TestUserCommands(t *testing.T) {
	isolateEnv(t)
	liveDir, offDir := t.TempDir(), t.TempDir()
	url, tok := startToolbus(t, liveDir)
	initStore(t, offDir)
	for _, d := range []struct {
		name, dir string
		args      []string
	}{
		{"server", liveDir, []string{"--server", url, "--token", tok}},
		{"data-dir", offDir, []string{"--data-dir", offDir}},
	} {
		t.Run(d.name, func(t *testing.T) {
			with := func(args ...string) []string { return append(args, d.args...) }
			verify := func(password string) error {
				t.Helper()
				s, err := store.Open(context.Background(), d.dir, store.StoreOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				return s.VerifyUser(context.Background(), "carol", []byte(password))
			}
			out := cli(t, with("user", "add", "--user", "carol", "--generate-password")...)
			first := lastLine(out)
			if !strings.Contains(out, "added user carol") || verify(first) != nil {
				t.Fatalf("user add:\n%s", out)
			}
			if _, _, err := runCLI(t, with("user", "add", "--user", "carol", "--generate-password")...); err == nil || !strings.Contains(err.Error(), "exists") {
				t.Fatalf("second user add: %v", err)
			}
			if out := cli(t, with("user", "list")...); !strings.HasPrefix(out, "USER") || !strings.Contains(out, "carol") {
				t.Fatalf("user list:\n%s", out)
			}
			out = cli(t, with("user", "passwd", "--user", "carol", "--generate-password")...)
			if second := lastLine(out); verify(second) != nil || !errors.Is(verify(first), store.ErrBadCredentials) {
				t.Fatalf("user passwd: the new password does not sign in, or the old one still does\n%s", out)
			}
			cli(t, with("token", "create", "--user", "carol")...)
			out = cli(t, with("user", "remove", "--user", "carol")...)
			if !strings.Contains(out, "removed user carol and revoked 1 token(s)") {
				t.Fatalf("user remove:\n%s", out)
			}
			var toks []admin.Token
			if err := json.Unmarshal([]byte(cli(t, with("token", "list", "--user", "carol", "--json")...)), &toks); err != nil || len(toks) != 1 || toks[0].RevokedAt == nil {
				t.Fatalf("token list after remove: %+v %v, want one revoked token", toks, err)
			}
			if _, _, err := runCLI(t, with("user", "remove", "--user", "carol")...); err == nil || !strings.Contains(err.Error(), "not found") {
				t.Fatalf("second user remove: %v", err)
			}
		})
	}
}

// TestUserAdminCommand: user add --admin and user admin ID on|off through
// both doors; the store and user list agree.
func TestUserAdminCommand(t *testing.T) {
	isolateEnv(t)
	liveDir, offDir := t.TempDir(), t.TempDir()
	url, tok := startToolbus(t, liveDir)
	initStore(t, offDir)
	for _, d := range []struct {
		name, dir string
		args      []string
	}{
		{"server", liveDir, []string{"--server", url, "--token", tok}},
		{"data-dir", offDir, []string{"--data-dir", offDir}},
	} {
		t.Run(d.name, func(t *testing.T) {
			with := func(args ...string) []string { return append(args, d.args...) }
			isAdmin := func(user string) bool {
				t.Helper()
				var users []admin.User
				if err := json.Unmarshal([]byte(cli(t, with("user", "list", "--json")...)), &users); err != nil {
					t.Fatal(err)
				}
				for _, u := range users {
					if u.ID == user {
						return u.Admin
					}
				}
				t.Fatalf("user %s not listed", user)
				return false
			}
			if out := cli(t, with("user", "add", "--user", "ops", "--admin", "--generate-password")...); !strings.Contains(out, "admin role") || !isAdmin("ops") {
				t.Fatalf("user add --admin:\n%s", out)
			}
			cli(t, with("user", "add", "--user", "dev", "--generate-password")...)
			if isAdmin("dev") {
				t.Fatal("a user added without --admin is an admin")
			}
			if out := cli(t, with("user", "list")...); !strings.HasPrefix(out, "USER  ADMIN") {
				t.Fatalf("user list:\n%s", out)
			}
			for _, tc := range []struct {
				user, onOff string
				want        bool
			}{{"dev", "on", true}, {"ops", "off", false}, {"dev", "off", false}} {
				cli(t, append([]string{"user", "admin", tc.user, tc.onOff}, d.args...)...)
				if isAdmin(tc.user) != tc.want {
					t.Fatalf("user admin %s %s: admin is %v", tc.user, tc.onOff, !tc.want)
				}
			}
			for _, bad := range [][]string{{"user", "admin", "dev"}, {"user", "admin", "dev", "yes"}} {
				if _, _, err := runCLI(t, with(bad...)...); err == nil {
					t.Fatalf("%v: no error", bad)
				}
			}
			if _, _, err := runCLI(t, with("user", "admin", "ghost", "on")...); err == nil || !strings.Contains(err.Error(), "not found") {
				t.Fatalf("user admin of an unknown user: %v", err)
			}
		})
	}
}
