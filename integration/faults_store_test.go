package integration

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Store faults: the data directory turns read-only under a running gateway.
// Root writes through file modes, so when the tests run as root (CI does)
// the commands that must meet the read-only directory run as nobody
// (uid 65534), on a directory that user owns.

// nobody is the unprivileged user the read-only commands run as under root.
const nobody = 65534

// unprivileged returns a command that runs bin with args as a user whom
// file modes bind: the current one, or nobody when that is root (then bin
// runs from a copy that nobody can execute).
func unprivileged(t *testing.T, binDir, bin string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		return exec.CommandContext(testCtx(t, 60*time.Second), bin, args...)
	}
	cp := filepath.Join(binDir, filepath.Base(bin))
	if _, err := os.Stat(cp); err != nil {
		copyFile(t, bin, cp, 0o755)
	}
	cmd := exec.CommandContext(testCtx(t, 60*time.Second), cp, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return cmd
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// worldDir makes a directory that nobody can reach (t.TempDir's parents
// are private to root); it is removed with the test, modes restored first.
func worldDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil {
				_ = os.Chmod(p, 0o700)
			}
			return nil
		})
		_ = os.RemoveAll(dir)
	})
	return dir
}

// setTreeMode gives every directory under root dirMode and every file
// fileMode; under root it also hands the tree to nobody.
func setTreeMode(t *testing.T, root string, dirMode, fileMode os.FileMode) {
	t.Helper()
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(p, nobody, nobody); err != nil {
				return err
			}
		}
		if info.IsDir() {
			return os.Chmod(p, dirMode)
		}
		return os.Chmod(p, fileMode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStoreReadOnlyDataDir: the data directory of a running gateway turns
// read-only (modes a-w: what an operator's mistake or a read-only volume
// looks like to the commands). Writes through the CLI (token create,
// mqtt-user add) fail with a message that says the store is read-only and
// a non-zero exit; the running gateway keeps serving what needs only
// reads: token authentication (also of a token it had never seen), tools/list,
// platform and agent calls, and the agent's MQTT login after a restart. A
// gateway started on the read-only directory refuses to start, saying why.
func TestStoreReadOnlyDataDir(t *testing.T) {
	dataDir := filepath.Join(worldDir(t, "toolbus-ro-"), "data")
	binDir := worldDir(t, "toolbus-bin-")
	pw := addAgentIdentity(t, dataDir, "ref-agent")
	tok := cliToken(t, dataDir, "alice")
	unseen := cliToken(t, dataDir, "bob") // first used after the directory turned read-only
	setTreeMode(t, dataDir, 0o700, 0o600)

	gw := startServeProc(t, dataDir, "127.0.0.1:0", "127.0.0.1:0")
	agentArgs := []string{"--broker-url", "tcp://" + gw.mqttAddr, "--username", "ref-agent",
		"--password", pw, "--client-id", "ref-agent-1", "--log-format", "text"}
	agent := startProc(t, nil, bins.expertAgent, agentArgs...)
	waitAgentTool(t, gw.mcpURL(), tok, "echo")

	setTreeMode(t, dataDir, 0o555, 0o444)

	refusals := []struct {
		name string
		args []string
	}{
		{"token create", []string{"token", "create", "--data-dir", dataDir, "--user", "carol"}},
		{"mqtt-user add", []string{"mqtt-user", "add", "--data-dir", dataDir, "--username", "agent2",
			"--role", "expert-agent", "--generate-password"}},
		{"serve", []string{"serve", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0"}},
	}
	for _, r := range refusals {
		out, err := unprivileged(t, binDir, bins.toolbus, r.args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("%s on a read-only data directory: err %v, want a non-zero exit\n%s", r.name, err, out)
			continue
		}
		if !strings.Contains(string(out), "store is read-only") {
			t.Errorf("%s on a read-only data directory: the message does not say the store is read-only:\n%s", r.name, out)
		}
		t.Logf("%s: %s", r.name, strings.TrimSpace(string(out)))
	}

	// The running gateway serves on.
	for _, secret := range []string{tok, unseen} {
		cs := connectMCP(t, gw.mcpURL(), secret, "2025-11-25", nil)
		for _, tool := range []string{"platform_echo", "echo"} {
			if _, err := callEcho(testCtx(t, 20*time.Second), cs, tool, "still here"); err != nil {
				t.Errorf("%s after the directory turned read-only: %v", tool, err)
			}
		}
	}
	if err := agent.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	startProc(t, nil, bins.expertAgent, append(agentArgs[:len(agentArgs)-4:len(agentArgs)-4],
		"--client-id", "ref-agent-2", "--log-format", "text")...)
	waitAgentTool(t, gw.mcpURL(), unseen, "echo")
	cs := connectMCP(t, gw.mcpURL(), tok, "2026-07-28", nil)
	if _, err := callEcho(testCtx(t, 20*time.Second), cs, "echo", "agent back"); err != nil {
		t.Errorf("echo through the restarted agent: %v", err)
	}
	if err := gw.stop(t, syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("toolbus exit on a read-only data directory: %v", err)
	}
}
