package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// childURLPrefix starts the one line a child server prints on stdout once it
// listens.
const childURLPrefix = "TOOLBUS_BENCH_URL "

// ServeChild runs the named baseline in this process on behalf of a parent
// harness: it prints the URL line on out, then serves until ctx is done or
// stdin reaches EOF (the parent closed it, or died), and closes the server.
func ServeChild(ctx context.Context, name string, stdin io.Reader, out io.Writer, opts ServerOptions) error {
	srv, err := NewBaseline(name, opts)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Close()
	if _, err := fmt.Fprintln(out, childURLPrefix+srv.URL()); err != nil {
		return fmt.Errorf("bench: announce URL: %w", err)
	}
	eof := make(chan struct{})
	go func() {
		// Owned by the parent: it ends when stdin closes, which is how the
		// parent stops this process.
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-ctx.Done():
	case <-eof:
	}
	return srv.Close()
}

// ChildOptions start a baseline server in a child process.
type ChildOptions struct {
	// Command is the argv that runs ServeChild for a baseline; the baseline
	// name is appended. Required.
	Command []string
	// Env is added to the parent's environment.
	Env []string
	// Stderr receives the child's stderr; nil discards it.
	Stderr io.Writer
	// StartTimeout bounds the wait for the URL line; 0 means 10s.
	StartTimeout time.Duration
}

// Child is a baseline server running in a child process.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
	done  chan struct{} // closed when the process has been waited for
	err   error         // Wait's error, read after done
}

// StartChild runs the named baseline in a child process and returns once it
// listens.
func StartChild(ctx context.Context, name string, opts ChildOptions) (*Child, error) {
	if len(opts.Command) == 0 {
		return nil, errors.New("bench: ChildOptions.Command is empty")
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	argv := append(append([]string(nil), opts.Command...), name)
	// Not CommandContext: the child must outlive a cancelled start only
	// until Close, which stops it through stdin with a deadline.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stderr = opts.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	c := &Child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		// Reads the URL line, then drains stdout until the child exits;
		// Wait must not run before stdout is drained.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), childURLPrefix); ok {
				select {
				case urlc <- u:
				default:
				}
			}
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	timer := time.NewTimer(opts.StartTimeout)
	defer timer.Stop()
	select {
	case c.url = <-urlc:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("bench: child %s exited before listening: %v", name, c.err)
	case <-timer.C:
		err = fmt.Errorf("bench: child %s did not listen within %s", name, opts.StartTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = c.Close()
	return nil, err
}

// URL is the child's MCP endpoint.
func (c *Child) URL() string { return c.url }

// PID of the child process.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Close stops the child (stdin EOF, then SIGKILL after 10s) and waits for
// it. Idempotent.
func (c *Child) Close() error {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			return errors.New("bench: child did not exit after SIGKILL")
		}
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("bench: child killed: %w", c.err)
		}
	}
	return c.err
}
