package console_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// bearer adds a token to every request of an MCP client.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// TestCallHistoryAPI: the overview's figures are in the admin API too
// (GET /api/v1/admin/calls): a go-sdk client's platform_echo calls show
// in the whole gateway's series and the platform's; with the console off
// there is no history and the API says so (501).
func TestCallHistoryAPI(t *testing.T) {
	srv, base := startConsole(t)
	secret := servertest.Token(t, srv, store.TokenSpec{UserID: "ops", Scopes: []string{store.ScopeToolsList, store.ScopeToolsCall, store.ScopeAdmin}})
	c := mcp.NewClient(&mcp.Implementation{Name: "calls-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx(t), &mcp.StreamableClientTransport{Endpoint: base + "/api/v1/mcp", HTTPClient: &http.Client{Transport: bearer(secret)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for range 3 {
		if _, err := cs.CallTool(ctx(t), &mcp.CallToolParams{Name: "platform_echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	adm, err := admin.NewClient(base, secret, admin.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h, err := adm.Calls(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.All.Calls != 3 || len(h.All.Minutes) != 60 || h.All.Minutes[59].Calls != 3 {
		t.Fatalf("the whole gateway: %d calls, %d minutes", h.All.Calls, len(h.All.Minutes))
	}
	if len(h.Series) != 1 || h.Series[0].Kind != "platform" || h.Series[0].Calls != 3 || h.Series[0].RecentP50Ms <= 0 {
		t.Fatalf("series: %+v", h.Series)
	}

	off := servertest.Start(t, server.Config{Console: server.ConsoleConfig{Disabled: true}})
	offSecret := servertest.Token(t, off, store.TokenSpec{UserID: "ops", Scopes: []string{store.ScopeAdmin}})
	offAdm, err := admin.NewClient("http://"+off.HTTPAddr().String(), offSecret, admin.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := offAdm.Calls(ctx(t)); !errors.Is(err, admin.ErrNoServer) {
		t.Fatalf("console off: %v, want ErrNoServer", err)
	}
}
