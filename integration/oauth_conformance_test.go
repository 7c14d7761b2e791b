package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
)

// TestOAuthConformanceSuite runs the official MCP conformance suite's
// authorization-server scenarios (its `authorization` command) against
// the built-in server: the metadata endpoint, and the authorization code
// grant, whose sign-in alice completes in Chromium.
func TestOAuthConformanceSuite(t *testing.T) {
	node, modules := testenv.NPMPackage(t, "@modelcontextprotocol/conformance")
	suite := filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
	e := startGateway(t, server.Config{})
	ctx := testCtx(t, 90*time.Second)
	if _, err := e.srv.Store().AddUser(ctx, "alice", []byte("alice-password")); err != nil {
		t.Fatal(err)
	}
	// The suite's callback listens on a port we choose and must register.
	_, port, _ := net.SplitHostPort(freeAddr(t))
	redirect := "http://127.0.0.1:" + port + "/callback"
	reg, err := oauthex.RegisterClient(ctx, e.base+"/oauth/register", &oauthex.ClientRegistrationMetadata{
		ClientName: "MCP conformance suite", RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	lines := make(chan string, 256)
	p := startProc(t, lines, node, suite, "authorization", "--url", e.base, "--client-id", reg.ClientID,
		"--resource", e.mcpURL(), "--port", port, "--output-dir", out)
	bctx := testenv.Browser(t, 90*time.Second)
	authURL := p.waitLine(t, lines, 60*time.Second, "an authorization URL", func(l string) bool {
		return strings.HasPrefix(strings.TrimSpace(l), e.base+"/oauth/authorize?")
	})
	signInInBrowser(t, bctx, strings.TrimSpace(authURL))
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Errorf("the suite exited with %v", err)
	}
	checked := 0
	err = filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(path) != "checks.json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var checks []struct{ ID, Name, Status, ErrorMessage string }
		if err := json.Unmarshal(b, &checks); err != nil {
			return err
		}
		for _, c := range checks {
			checked++
			if c.Status != "SUCCESS" {
				t.Errorf("%s: %s %s: %s", filepath.Base(filepath.Dir(path)), c.ID, c.Status, c.ErrorMessage)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 2 {
		t.Fatalf("the suite wrote %d checks, want both scenarios'", checked)
	}
}
