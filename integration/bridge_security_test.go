package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/server"
)

// An upstream answer longer than the bridge reads (--upstream-max-message)
// is not kept: its call gets a tool error that says so, and the session
// goes on serving the next calls, for answers in a JSON body and in an
// event stream alike.
func TestBridgeUpstreamAnswerTooLarge(t *testing.T) {
	const maxMessage = 64 << 10
	large := strings.Repeat("x", 4*maxMessage)
	upstream := mcp.NewServer(&mcp.Implementation{Name: "large-upstream", Version: "1.0"}, nil)
	mcp.AddTool(upstream, &mcp.Tool{Name: "large", Description: "Answers more than the bridge reads."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(large), nil, nil
		})
	mcp.AddTool(upstream, &mcp.Tool{Name: "small", Description: "Answers a little."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text("small"), nil, nil
		})
	tests := []struct {
		name string
		json bool // answers in a JSON body, not an event stream
	}{
		{name: "event stream"},
		{name: "json body", json: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t, server.Config{})
			e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
			var initializes atomic.Int64
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return upstream }, &mcp.StreamableHTTPOptions{JSONResponse: tt.json})
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					body, err := io.ReadAll(r.Body)
					if err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					if strings.Contains(string(body), `"method":"initialize"`) {
						initializes.Add(1)
					}
					r.Body = io.NopCloser(strings.NewReader(string(body)))
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(hs.Close)
			agent := "large" + map[bool]string{false: "sse", true: "json"}[tt.json]
			startBridge(t, srv, agent, agent+"-1", bridge.Options{URL: hs.URL, MaxMessage: maxMessage})

			c := connectBridgeClient(t, e, "2025-11-25", "hal")
			ctx := testCtx(t, 30*time.Second)
			for range 2 {
				res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "large"})
				if err != nil {
					t.Fatalf("large: %v", err)
				}
				if got := textOf(t, res); !res.IsError || !strings.Contains(got, "--upstream-max-message") || len(got) > 1024 {
					t.Fatalf("large = isError %v, %.200q; want a short tool error naming --upstream-max-message", res.IsError, got)
				}
				if got := c.callText(t, "small", nil); got != "small" {
					t.Fatalf("small after large = %q", got)
				}
			}
			if n := initializes.Load(); n != 1 {
				t.Errorf("the upstream was initialized %d times, want once: the session must survive a long answer", n)
			}
		})
	}
}

// A stdio server runs as the bridge's user. Started with the broker
// password in its environment, as docs/bridge.md says to, the bridge
// keeps it from the server: not in the server's environment, not in the
// bridge's command line, and /proc/<bridge>/environ refused (the bridge is
// undumpable). The bridge and its server run as an unprivileged user:
// root (these tests' usual user) reads any process's environ through
// CAP_SYS_PTRACE, which no flag of the bridge can take away.
func TestBridgeStdioServerCannotReadPassword(t *testing.T) {
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534} // nobody
	}
	// Not t.TempDir(): its parent is closed to other users.
	dir, err := os.MkdirTemp("", "toolbus-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "expert-agent")
	copyFile(t, bins.expertAgent, bin, 0o755)
	probe := filepath.Join(dir, "probe.sh")
	if err := os.WriteFile(probe, []byte(`#!/bin/sh
# What a stdio server can learn of the bridge that started it.
if env=$(tr '\0' '\n' < /proc/$PPID/environ 2>&1); then
	case "$env" in
	*TOOLBUS_AGENT_PASSWORD=*) echo "PROBE bridge-environ password-read" >&2 ;;
	*) echo "PROBE bridge-environ readable-without-password" >&2 ;;
	esac
else
	echo "PROBE bridge-environ refused" >&2
fi
case "$(tr '\0' ' ' < /proc/$PPID/cmdline)" in
*"$PROBE_SECRET_MARK"*) echo "PROBE bridge-cmdline password-read" >&2 ;;
*) echo "PROBE bridge-cmdline no-password" >&2 ;;
esac
case "$(env)" in
*TOOLBUS_AGENT_*) echo "PROBE own-environ password-read" >&2 ;;
*) echo "PROBE own-environ no-password" >&2 ;;
esac
echo "PROBE done" >&2
exec sleep 30
`), 0o755); err != nil {
		t.Fatal(err)
	}

	secret := randomHex(t)
	cmd := exec.Command(bin, "bridge", "--username", "probe", "--broker-url", "tcp://127.0.0.1:1", "--log-format", "text", "--", probe)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOOLBUS_AGENT_PASSWORD="+secret, "PROBE_SECRET_MARK="+secret[:8])
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	probes := make(chan string, 16)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		w := testLogger(t).Writer()
		defer w.Close()
		for sc.Scan() {
			line := sc.Text()
			_, _ = io.WriteString(w, "bridge: "+line+"\n")
			if i := strings.Index(line, "PROBE "); i >= 0 {
				rest := line[i+len("PROBE "):]
				if j := strings.IndexAny(rest, `"\`); j >= 0 { // the end of the logged message
					rest = rest[:j]
				}
				probes <- rest
			}
		}
		_ = cmd.Wait()
		close(probes)
	}()

	got := map[string]string{}
	deadline := time.After(20 * time.Second)
	for got["done"] == "" {
		select {
		case p, ok := <-probes:
			if !ok {
				t.Fatalf("the bridge exited before the probe finished; got %v", got)
			}
			what, result, _ := strings.Cut(p, " ")
			if what == "done" {
				result = "yes"
			}
			got[what] = result
		case <-deadline:
			t.Fatalf("no probe result within 20s; got %v", got)
		}
	}
	want := map[string]string{"bridge-environ": "refused", "bridge-cmdline": "no-password", "own-environ": "no-password", "done": "yes"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
