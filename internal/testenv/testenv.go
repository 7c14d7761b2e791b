package testenv

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// Writer returns a writer that sends each write to t.Log (one call a
// write, its trailing newline dropped) until the test ends, and drops what
// a straggling goroutine writes after that.
func Writer(t testing.TB) io.Writer {
	t.Helper()
	w := &writer{t: t}
	t.Cleanup(w.stop)
	return w
}

type writer struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *writer) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// Logger is LoggerAt with logrus.DebugLevel.
func Logger(t testing.TB, component string) *logrus.Entry {
	t.Helper()
	return LoggerAt(t, component, logrus.DebugLevel)
}

// LoggerAt returns a logger at level that writes to t.Log while the test
// runs (seen with -v or on failure), through Writer. Every entry carries
// the field component, unless component is empty. A benchmark's logger
// discards everything: b.Log is always printed, and would cost time in the
// timed loop.
func LoggerAt(t testing.TB, component string, level logrus.Level) *logrus.Entry {
	t.Helper()
	l := logrus.New()
	if _, bench := t.(*testing.B); bench {
		l.SetOutput(io.Discard)
	} else {
		l.SetOutput(Writer(t))
		l.SetLevel(level)
	}
	if component == "" {
		return logrus.NewEntry(l)
	}
	return l.WithField("component", component)
}

// Context returns a context that ends after d or when the test ends,
// whichever comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pollInterval is the pause between two calls of Poll's condition.
const pollInterval = 5 * time.Millisecond

// Poll calls cond until it returns true, and fails the test if it has not
// after d. what names the awaited condition in the failure.
func Poll(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(pollInterval)
	}
}

// stopWait bounds how long Run's cleanup waits for what it started.
const stopWait = 10 * time.Second

// Run runs run (an agent's Run, a server loop) on a goroutine of its own
// for the rest of the test: the cleanup cancels its context and waits for
// it to return, at most stopWait, reporting what did not stop.
func Run(t testing.TB, what string, run func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(stopWait):
			t.Errorf("%s did not stop within %s", what, stopWait)
		}
	})
}

// ModuleVersion is the main module's version that `go version -m` reads
// from the binary bin: what a build must report when it is not "(devel)".
func ModuleVersion(t testing.TB, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" {
			return f[2]
		}
	}
	t.Fatalf("no mod line in go version -m:\n%s", out)
	return ""
}
