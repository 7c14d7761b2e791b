package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/agentcli"
)

// clientName is how the bridge introduces itself to the upstream.
const clientName = "toolbus-bridge"

// connect starts the upstream (a process, or an HTTP session) and
// initializes it, within InitTimeout.
func (l *lifetime) connect(ctx context.Context) error {
	o := &l.b.opts
	client := sdk.NewClient(&sdk.Implementation{Name: clientName, Version: o.Agent.Version}, &sdk.ClientOptions{
		// Roots without listChanged: the bridge has none of its own and
		// asks the caller during a call.
		Capabilities:               &sdk.ClientCapabilities{RootsV2: &sdk.RootCapabilities{}},
		CreateMessageHandler:       l.sample,
		ElicitationHandler:         l.elicit,
		ToolListChangedHandler:     func(context.Context, *sdk.ToolListChangedRequest) { l.listChanged("tools") },
		PromptListChangedHandler:   func(context.Context, *sdk.PromptListChangedRequest) { l.listChanged("prompts") },
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) { l.listChanged("resources") },
		// Progress and log messages are tapped off the wire (notes.go).
		// Input required results from a 2026 upstream go to the caller as
		// they are: the caller answers them, not the bridge.
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
	})
	client.AddReceivingMiddleware(l.rootsMiddleware)

	var t sdk.Transport
	if len(o.Command) > 0 {
		p, err := l.startProcess()
		if err != nil {
			return fmt.Errorf("start the upstream %s: %w", l.b.upstreamName(), err)
		}
		// The frameReader bounds each line; the go-sdk's own bound would
		// end the session.
		t = &sdk.IOTransport{Reader: &tapReader{r: newFrameReader(p.stdout, frameLines, o.MaxMessage, l.overMax), tap: l.tap},
			Writer: p, MaxLineLength: -1}
	} else {
		hc := o.HTTPClient
		if hc == nil {
			hc = &http.Client{}
		}
		c := *hc
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		if len(o.Header) > 0 {
			base = headerTransport{base: base, header: o.Header}
		}
		c.Transport = tapTransport{base: base, tap: l.tap, max: o.MaxMessage, over: l.overMax}
		// The frameReader bounds each event (and each body, which the
		// go-sdk reads unbounded); the go-sdk's bound, a backstop, would
		// end the stream.
		t = &sdk.StreamableClientTransport{Endpoint: o.URL, HTTPClient: &c, MaxEventSize: o.MaxMessage + frameChunk}
	}
	ictx, cancel := context.WithTimeout(ctx, o.InitTimeout)
	defer cancel()
	var so *sdk.ClientSessionOptions
	if o.ProtocolVersion != "" {
		so = &sdk.ClientSessionOptions{ProtocolVersion: o.ProtocolVersion}
	}
	cs, err := client.Connect(ictx, t, so)
	if err != nil {
		if l.proc != nil {
			_ = l.proc.Close()
		}
		l.stderr.flush()
		if ctx.Err() == nil && errors.Is(ictx.Err(), context.DeadlineExceeded) {
			// The first run of "npx -y" or "uvx" downloads the server
			// before it starts: minutes on a slow link.
			return fmt.Errorf("initialize the upstream %s: %w (%v): a first run that downloads the server (npx -y, uvx) can take longer; "+
				"raise --init-timeout (Options.InitTimeout), or run the download once beforehand", l.b.upstreamName(), ErrInitTimeout, o.InitTimeout)
		}
		return fmt.Errorf("initialize the upstream %s: %w", l.b.upstreamName(), l.b.redact.err(err))
	}
	l.cs = cs
	return nil
}

// overMax logs a message of the upstream over MaxMessage, which the
// frameReader dropped.
func (l *lifetime) overMax(size int, id json.RawMessage) {
	log := l.log.WithFields(logrus.Fields{"bytes": size, "maxMessage": l.b.opts.MaxMessage})
	if id == nil {
		log.Warn("upstream message over the size limit dropped")
		return
	}
	log.WithField("id", string(id)).Warn("upstream answer over the size limit; the call is answered with an error")
}

// processStopWait is how long a stdio upstream gets to exit after its
// stdin closes, and then after SIGTERM, before it is killed.
const processStopWait = 2 * time.Second

// startProcess starts a stdio upstream's process.
func (l *lifetime) startProcess() (*process, error) {
	o := &l.b.opts
	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Env = o.Env
	if cmd.Env == nil {
		cmd.Env = withoutAgentEnv(os.Environ())
	}
	cmd.Dir = o.Dir
	// Its own process group, signalled whole, so that helpers it started
	// go with it; and a bound on the wait for its stderr, which a helper
	// that survives would hold open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = processStopWait
	l.stderr = &lineLogger{log: l.b.log.WithField("stream", "upstream-stderr")}
	cmd.Stderr = l.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l.proc = &process{cmd: cmd, stdin: stdin, stdout: stdout}
	return l.proc, nil
}

// process is a stdio upstream's process, written to through its stdin.
// Close ends it the way the MCP specification says: stdin closed, then
// SIGTERM, then SIGKILL, each after processStopWait.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	once   sync.Once
	err    error
}

func (p *process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

func (p *process) Close() error {
	p.once.Do(func() {
		_ = p.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t := time.NewTimer(processStopWait)
			select {
			case p.err = <-done:
				t.Stop()
				return
			case <-t.C:
			}
			// The whole group: helpers the server started go too.
			if err := syscall.Kill(-p.cmd.Process.Pid, sig.(syscall.Signal)); err != nil {
				_ = p.cmd.Process.Signal(sig)
			}
		}
		p.err = <-done // SIGKILL cannot be ignored, and WaitDelay bounds the stderr copy
	})
	return p.err
}

// upstreamName names the upstream in logs and errors, which callers read:
// its program, or its URL's scheme and host, without the user info, path
// and query that may hold a credential.
func (b *Bridge) upstreamName() string {
	if len(b.opts.Command) > 0 {
		return fmt.Sprintf("%q", b.opts.Command[0])
	}
	u, err := url.Parse(b.opts.URL)
	if err != nil || u.Host == "" {
		return "(its URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

func serverName(init *sdk.InitializeResult) string {
	if init == nil || init.ServerInfo == nil {
		return ""
	}
	return init.ServerInfo.Name + " " + init.ServerInfo.Version
}

// withoutAgentEnv is env without the agent commands' own variables: the
// bridge's broker password must not reach the upstream.
func withoutAgentEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, agentcli.EnvPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// headerTransport adds the operator's headers to every upstream request.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range t.header {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return t.base.RoundTrip(req)
}

// maxStderrLine bounds one logged line of the upstream's stderr; a longer
// one is logged in pieces.
const maxStderrLine = 4096

// lineLogger logs what the upstream writes to stderr, a line per entry.
// exec.Cmd copies the process's stderr into it from a goroutine of its own.
type lineLogger struct {
	log *logrus.Entry
	mu  sync.Mutex
	buf []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) >= maxStderrLine {
				w.emit(w.buf[:maxStderrLine])
				w.buf = w.buf[maxStderrLine:]
				continue
			}
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) == 0 {
		w.buf = nil // let a burst's buffer go
	}
	return len(p), nil
}

// flush logs what is left of a last line without its newline.
func (w *lineLogger) flush() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

func (w *lineLogger) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) > 0 {
		w.log.Info(string(line))
	}
}
