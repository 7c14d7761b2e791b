package integration

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/server"
)

// testCtx returns a context that ends with the test or after d.
var testCtx = testenv.Context

// testLogger sends logs to t.Log until the test ends.
func testLogger(t testing.TB) *logrus.Entry {
	t.Helper()
	return testenv.Logger(t, "")
}

// startServer starts an in-process toolbus on free loopback ports.
func startServer(t testing.TB, cfg server.Config) *server.Server {
	t.Helper()
	return servertest.Start(t, cfg)
}

// proc is a child process whose output goes to the test log.
type proc struct {
	cmd  *exec.Cmd
	done chan error
}

// startProc runs bin with args; the process is killed when the test ends.
// Lines of its stdout are also sent to lines, if not nil.
func startProc(t *testing.T, lines chan<- string, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	w := testenv.Writer(t) // stops after the cleanup below: cleanups run last in, first out
	pipe := func(r io.Reader, ch chan<- string) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			_, _ = w.Write([]byte(bin[strings.LastIndex(bin, "/")+1:] + ": " + sc.Text()))
			if ch != nil {
				select {
				case ch <- sc.Text():
				default:
				}
			}
		}
	}
	go pipe(stdout, lines)
	go pipe(stderr, nil)
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	go func() {
		wg.Wait() // Wait must follow the reads of the pipes
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// signal sends sig and waits for the process to exit, up to d.
func (p *proc) stop(t *testing.T, sig syscall.Signal, d time.Duration) error {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err // keep it for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("process %s did not exit within %v of %v", p.cmd.Path, d, sig)
		return nil
	}
}

// wait waits up to d for the process to exit by itself and returns how it
// ended; it fails the test if it is still running then.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("process %s still running after %v", p.cmd.Path, d)
		return nil
	}
}

// waitLine returns the first of the process's lines (startProc's lines)
// that match accepts, skipping others; it fails the test, saying what it
// waited for, when the process exits first or d passes.
func (p *proc) waitLine(t *testing.T, lines <-chan string, d time.Duration, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-lines:
			if match(l) {
				return l
			}
		case err := <-p.done:
			p.done <- err // keep it for the cleanup
			t.Fatalf("%s exited (%v) before %s", p.cmd.Path, err, what)
		case <-deadline:
			t.Fatalf("%s: no %s within %v", p.cmd.Path, what, d)
		}
	}
}

// poll calls cond until it is true or d passes.
var poll = testenv.Poll

// runUntilCleanup runs run (an agent's or a bridge's Run) until the test
// ends, then cancels its context and checks that it returned nil in time.
func runUntilCleanup(t testing.TB, what string, run func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not stop", what)
		}
	})
}
