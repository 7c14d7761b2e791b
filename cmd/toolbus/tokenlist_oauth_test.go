package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/store"
)

// token list shows the audience and client of a token an OAuth consent
// minted (docs/oauth.md says it does), and "-" for a personal token's.
func TestTokenListShowsOAuthFields(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	initStore(t, dir)
	st, err := store.Open(t.Context(), dir, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const audience, client = "https://mcp.example.com/api/v1/mcp", "cl_demo-client"
	_, oauthTok, err := st.CreateToken(t.Context(), store.TokenSpec{UserID: "alice", Name: "oauth: demo", Audience: audience, ClientID: client})
	if err != nil {
		t.Fatal(err)
	}
	_, personal, err := st.CreateToken(t.Context(), store.TokenSpec{UserID: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(strings.TrimRight(cli(t, "token", "list", "--data-dir", dir), "\n"), "\n")
	header := strings.Fields(lines[0])
	col := func(name string) int {
		t.Helper()
		i := slices.Index(header, name)
		if i < 0 {
			t.Fatalf("no %s column in %q", name, lines[0])
		}
		return i
	}
	aud, cl := col("AUDIENCE"), col("CLIENT")
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	for _, tc := range []struct {
		id, audience, client string
	}{
		{oauthTok.ID, audience, client},
		{personal.ID, "-", "-"},
	} {
		r := rows[tc.id]
		if len(r) <= max(aud, cl) || r[aud] != tc.audience || r[cl] != tc.client {
			t.Errorf("row %v: want audience %q, client %q", r, tc.audience, tc.client)
		}
	}
}
