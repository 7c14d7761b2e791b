package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The thirty-line agent of docs/agent-sdk.md (examples/greeter), built and
// run as its readers would, serves its tool through the gateway.
func TestExampleAgent(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "greeter")
	if out, err := exec.CommandContext(testCtx(t, 2*time.Minute), "go", "build", "-o", bin, "../examples/greeter").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/greeter: %v\n%s", err, out)
	}
	srv := startServer(t, server.Config{})
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), "greeter", acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GREETER_BROKER_URL=tcp://"+srv.MQTTAddr().String(),
		"GREETER_USERNAME=greeter", "GREETER_PASSWORD="+agentPassword)
	cmd.Stdout, cmd.Stderr = testenv.Writer(t), testenv.Writer(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "ada"}), "2025-11-25", nil)
	var res *mcp.CallToolResult
	poll(t, 20*time.Second, "greet to answer", func() bool {
		r, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Ada"}})
		res = r
		return err == nil && !r.IsError
	})
	if got := textOf(t, res); got != "Hello, Ada!" {
		t.Errorf("greet = %q", got)
	}
	bad, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": 42}})
	if err != nil || !bad.IsError || !strings.Contains(textOf(t, bad), "invalid arguments") {
		t.Errorf("greet with a number: %+v, %v; want an isError result", bad, err)
	}
}

// A fresh `toolbus serve` says how to make the first token (nothing can
// call it without one), and the command it prints works; once a token
// exists, it says nothing of the kind.
func TestServeHintsFirstToken(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	serve := func() (hint string) {
		t.Helper()
		lines := make(chan string, 64)
		p := startProc(t, lines, bins.toolbus, "serve", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0")
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l := <-lines:
				if strings.HasPrefix(l, "toolbus: no token yet") {
					hint = l
				}
				if strings.HasPrefix(l, "toolbus: http://") { // printed after the hint, if any
					if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
						t.Errorf("serve stop: %v", err)
					}
					return hint
				}
			case <-deadline:
				t.Fatal("serve did not start")
			}
		}
	}
	hint := serve()
	_, cmdLine, ok := strings.Cut(hint, "create the first: ")
	if !ok || !strings.Contains(cmdLine, "--data-dir "+dataDir) {
		t.Fatalf("fresh serve: hint %q", hint)
	}
	args := strings.Fields(strings.ReplaceAll(cmdLine, "YOU", "root"))[1:] // without "toolbus"
	if out, err := exec.Command(bins.toolbus, args...).CombinedOutput(); err != nil {
		t.Fatalf("the printed command failed: %v\n%s", err, out)
	}
	if hint := serve(); hint != "" {
		t.Errorf("serve with a token still hints: %q", hint)
	}
}
