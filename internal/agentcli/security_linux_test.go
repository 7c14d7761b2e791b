package agentcli_test

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolbus/toolbus/internal/agentcli"
)

// helperEnv makes a run of this test binary one of the helper processes of
// TestUndumpableEnvironRefused: "dumpable" or "undumpable" (a process that
// holds a secret in its environment and waits for its stdin to close), or
// "read <pid>" (a process that tries to read the first one's environ).
const helperEnv = "TOOLBUS_AGENTCLI_HELPER"

// TestHelperProcess is no test of its own: TestUndumpableEnvironRefused
// runs it in processes of their own.
func TestHelperProcess(t *testing.T) {
	mode, arg, _ := strings.Cut(os.Getenv(helperEnv), " ")
	switch mode {
	case "":
		return
	case "undumpable", "dumpable":
		if mode == "undumpable" {
			if err := agentcli.Undumpable(); err != nil {
				_, _ = io.WriteString(os.Stderr, err.Error()+"\n")
				os.Exit(2)
			}
		}
		_, _ = io.WriteString(os.Stdout, "ready\n")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the test ends
	case "read":
		result := "read"
		if _, err := os.ReadFile("/proc/" + arg + "/environ"); errors.Is(err, fs.ErrPermission) {
			result = "refused"
		} else if err != nil {
			result = err.Error()
		}
		_, _ = io.WriteString(os.Stdout, "environ "+result+"\n")
	}
	os.Exit(0)
}

// Another process of the same user, without CAP_SYS_PTRACE, cannot read
// the environment of an undumpable one (where an agent's password stays
// for its life), and can read that of a dumpable one. Both run as nobody
// when the tests run as root, whose CAP_SYS_PTRACE reads any process's
// environ.
func TestUndumpableEnvironRefused(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := ""
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534} // nobody
		// A copy nobody can run: the test binary's own directory is
		// closed to other users.
		dir, err = os.MkdirTemp("", "toolbus-agentcli-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin = copyExecutable(t, bin, filepath.Join(dir, "agentcli.test"))
	}
	helper := func(mode string) *exec.Cmd {
		cmd := exec.Command(bin, "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), helperEnv+"="+mode, "TOOLBUS_AGENT_PASSWORD=the-secret")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Stderr = os.Stderr
		return cmd
	}

	tests := []struct {
		mode, want string
	}{
		{mode: "dumpable", want: "read"}, // the reader can read what is not refused
		{mode: "undumpable", want: "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			holder := helper(tt.mode)
			stdin, err := holder.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = stdin.Close() // the holder exits when its stdin closes
				_ = holder.Wait()
			})
			// The holder says ready once it is (un)dumpable, or exits.
			if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
				t.Fatalf("the holder did not start: %q, %v", line, err)
			}

			out, err := helper("read " + strconv.Itoa(holder.Process.Pid)).Output()
			if err != nil {
				t.Fatalf("the reader: %v", err)
			}
			if got := strings.TrimSpace(string(out)); got != "environ "+tt.want {
				t.Errorf("reading /proc/<%s process>/environ: %q, want %q", tt.mode, got, "environ "+tt.want)
			}
		})
	}
}

// copyExecutable copies the file src to dst, executable by all, and
// returns dst.
func copyExecutable(t *testing.T, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}
