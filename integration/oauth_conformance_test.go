package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	redirect := "http://127.0.0.1:" + strconv.Itoa(port) + "/callback"
	reg, err := oauthex.RegisterClient(ctx, e.base+"/oauth/register", &oauthex.ClientRegistrationMetadata{
		ClientName: "MCP conformance suite", RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	lines := make(chan string, 256)
	p := startProc(t, lines, node, suite, "authorization", "--url", e.base, "--client-id", reg.ClientID,
		"--resource", e.mcpURL(), "--port", strconv.Itoa(port), "--output-dir", out)
	bctx := testenv.Browser(t, 90*time.Second)
	deadline := time.After(60 * time.Second)
	var authURL string
	for authURL == "" {
		select {
		case l := <-lines:
			if l = strings.TrimSpace(l); strings.HasPrefix(l, e.base+"/oauth/authorize?") {
				authURL = l
			}
		case err := <-p.done:
			p.done <- err // for startProc's cleanup
			t.Fatalf("the suite exited (%v) before asking for a sign-in", err)
		case <-deadline:
			t.Fatal("the suite printed no authorization URL in 60 s")
		}
	}
	signInInBrowser(t, bctx, authURL)
	select {
	case err := <-p.done:
		p.done <- err // for startProc's cleanup
		if err != nil {
			t.Errorf("the suite exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the suite did not finish within 60 s of the sign-in")
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
