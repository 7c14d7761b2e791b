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

	"github.com/toolbus/toolbus/server"
)

// testCtx returns a context that ends with the test or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testLogger sends logs to t.Log until the test ends.
func testLogger(t *testing.T) *logrus.Entry {
	t.Helper()
	l := logrus.New()
	w := &tWriter{t: t}
	l.Out = w
	l.SetLevel(logrus.DebugLevel)
	t.Cleanup(w.stop)
	return logrus.NewEntry(l)
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tWriter) stop() { w.mu.Lock(); w.done = true; w.mu.Unlock() }

// startServer starts an in-process toolbus on free loopback ports.
func startServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MQTTAddr = "127.0.0.1:0"
	if cfg.HashIterations == 0 {
		cfg.HashIterations = 1000 // the default count is tested in acl; logins here need not be slow
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(testCtx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return srv
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
	w := &tWriter{t: t}
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
		w.stop()
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

// poll calls cond until it is true or d passes.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
