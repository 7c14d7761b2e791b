package integration

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// `make run`'s script: a second one while the first runs refuses at once,
// saying why, and touches nothing (no token minted, no password reset);
// Ctrl-C (SIGINT) stops the first, agents before the server, with exit 0.
// The sign-in password it prints is the demo user's.
func TestMakeRunTwiceAndCtrlC(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	env := append(os.Environ(), "TOOLBUS_BIN_DIR="+filepath.Dir(bins.toolbus), "TOOLBUS_DATA_DIR="+dataDir,
		"TOOLBUS_HTTP_ADDR="+freeAddr(t), "TOOLBUS_MQTT_ADDR="+freeAddr(t))
	first := exec.Command("bash", "../scripts/run-demo.sh")
	first.Env = env
	first.Stderr = testenv.Writer(t)
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	running := make(chan struct{})
	var password string // written before running is closed
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "sign-in: user demo, password "); ok {
				password = p
			}
			if !signalled && strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
				signalled = true
				close(running)
			}
		}
		done <- first.Wait()
	}()
	t.Cleanup(func() { _ = first.Process.Kill() })
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("make run exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("make run did not start")
	}
	tokens := func() int {
		t.Helper()
		o, err := exec.Command(bins.toolbus, "token", "list", "--data-dir", dataDir, "--json").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(o), `"id"`)
	}
	before := tokens()

	second := exec.Command("bash", "../scripts/run-demo.sh")
	second.Env = env
	o, err := second.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 || !strings.Contains(string(o), "listens on") {
		t.Fatalf("second make run: %v\n%s", err, o)
	}
	if after := tokens(); after != before {
		t.Errorf("the refused run minted %d tokens", after-before)
	}

	if err := first.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("make run after Ctrl-C: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("make run did not stop after Ctrl-C")
	}

	ctx := testCtx(t, 30*time.Second)
	st, err := store.Open(ctx, dataDir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.VerifyUser(ctx, "demo", []byte(password)); err != nil {
		t.Errorf("the printed sign-in password %q: %v", password, err)
	}
}
