package testenv

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServerEverything starts the reference server with the argv
// ServerEverything returns, through the go-sdk's client over stdio, lists
// its tools and closes.
func TestServerEverything(t *testing.T) {
	argv := ServerEverything(t)
	if len(argv) < 2 || !filepath.IsAbs(argv[0]) || !filepath.IsAbs(argv[1]) {
		t.Fatalf("ServerEverything = %q, want absolute paths of node and the entry script first", argv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = Writer(t)
	// No capabilities: a client with roots gets a roots/list request 350 ms
	// after initialized, and a server still waiting for that answer when
	// its stdin closes lingers until SIGTERM.
	client := mcp.NewClient(&mcp.Implementation{Name: "testenv", Version: "1"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to %q: %v", argv, err)
	}
	defer cs.Close()
	t.Logf("server %s %s, protocol %s", cs.InitializeResult().ServerInfo.Name,
		cs.InitializeResult().ServerInfo.Version, cs.InitializeResult().ProtocolVersion)

	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"echo", "trigger-long-running-operation"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list = %q, want %q among them", names, want)
		}
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
