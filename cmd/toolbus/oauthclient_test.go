package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// consentedClient registers a public client in st and runs one consent
// of alice's through to a grant; it returns the client's ID and the
// access token.
func consentedClient(t *testing.T, st *store.Store, name string) (string, string) {
	t.Helper()
	ctx := t.Context()
	c, _, err := st.RegisterOAuthClient(ctx, name, []string{"http://127.0.0.1:9/cb"}, false)
	if err != nil {
		t.Fatal(err)
	}
	spec := store.TokenSpec{UserID: "alice", Scopes: []string{store.ScopeToolsList}, TTL: time.Hour,
		Audience: "http://127.0.0.1:9/api/v1/mcp", ClientID: c.ID, Name: "oauth: " + name}
	code, err := st.SaveOAuthCode(ctx, store.OAuthCode{ClientID: c.ID, RedirectURI: "http://127.0.0.1:9/cb", Challenge: "ch", Spec: spec,
		Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	redeemed, err := st.RedeemOAuthCode(ctx, code)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := st.GrantOAuth(ctx, redeemed, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c.ID, toks.Access
}

// TestOAuthClientCommands: `oauth-client list` and `oauth-client delete
// ID` through the API of a running toolbus and on a data directory: the
// list names the client with its grant and token; delete removes it and
// its token; a second delete is not found; delete without an ID says how.
func TestOAuthClientCommands(t *testing.T) {
	isolateEnv(t)
	srv := servertest.Start(t, server.Config{DataDir: t.TempDir()})
	adminTok := servertest.Token(t, srv, store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin}})
	liveID, liveAccess := consentedClient(t, srv.Store(), "Live client")

	offDir := t.TempDir()
	initStore(t, offDir)
	st, err := store.Open(t.Context(), offDir, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	offID, offAccess := consentedClient(t, st, "Offline client")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	for _, d := range []struct {
		name, id, access string
		args             []string
		refused          func(t *testing.T) error
	}{
		{"server", liveID, liveAccess, []string{"--server", "http://" + srv.HTTPAddr().String(), "--token", adminTok},
			func(t *testing.T) error {
				_, err := srv.Store().AuthenticateToken(t.Context(), liveAccess)
				return err
			}},
		{"data-dir", offID, offAccess, []string{"--data-dir", offDir},
			func(t *testing.T) error {
				_, err := authenticate(t, offDir, offAccess)
				return err
			}},
	} {
		t.Run(d.name, func(t *testing.T) {
			with := func(args ...string) []string { return append(args, d.args...) }
			if err := d.refused(t); err != nil {
				t.Fatalf("the client's token before deletion: %v", err)
			}
			out := cli(t, with("oauth-client", "list")...)
			if !strings.HasPrefix(out, "ID ") || !strings.Contains(out, d.id) || !strings.Contains(out, "public") ||
				!strings.Contains(out, "http://127.0.0.1:9/cb") || !strings.Contains(out, "client") {
				t.Fatalf("oauth-client list:\n%s", out)
			}
			var cls []admin.OAuthClient
			if err := json.Unmarshal([]byte(cli(t, with("oauth-client", "list", "--json")...)), &cls); err != nil ||
				len(cls) != 1 || cls[0].ID != d.id || cls[0].Grants != 1 || cls[0].Tokens != 1 || cls[0].Confidential {
				t.Fatalf("oauth-client list --json = %+v, %v", cls, err)
			}

			out = cli(t, append([]string{"oauth-client", "delete", d.id}, d.args...)...)
			if !strings.HasPrefix(out, "deleted OAuth client "+d.id+" with 1 grants, 1 authorization codes and 1 tokens") {
				t.Fatalf("oauth-client delete:\n%s", out)
			}
			if err := d.refused(t); err == nil {
				t.Fatal("the deleted client's token still authenticates")
			}
			if err := json.Unmarshal([]byte(cli(t, with("oauth-client", "list", "--json")...)), &cls); err != nil || len(cls) != 0 {
				t.Fatalf("list after delete = %+v, %v", cls, err)
			}
			if _, _, err := runCLI(t, append([]string{"oauth-client", "delete", d.id}, d.args...)...); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("deleting twice: %v, want ErrNotFound", err)
			}
			if _, _, err := runCLI(t, with("oauth-client", "delete")...); err == nil || !strings.Contains(err.Error(), "toolbus oauth-client delete ID") {
				t.Errorf("delete without an ID: %v", err)
			}
		})
	}
}
