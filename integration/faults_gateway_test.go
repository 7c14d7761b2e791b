package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// Gateway faults: SIGTERM under load, a restart on the same data directory,
// and a start that cannot succeed. The gateway runs as the real `toolbus
// serve` binary beside the real expert-agent binary, driven by go-sdk MCP
// clients.

// serveProc is a running `toolbus serve`.
type serveProc struct {
	*proc
	dataDir, httpAddr, mqttAddr string
}

func (g *serveProc) mcpURL() string { return "http://" + g.httpAddr + "/api/v1/mcp" }

// freeAddr returns a loopback address that was free a moment ago, for a
// process that must come back on the same ports.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServeProc runs `toolbus serve` on dataDir with the given addresses
// ("127.0.0.1:0" for any) and waits for the line with its bound addresses.
func startServeProc(t *testing.T, dataDir, httpAddr, mqttAddr string, extra ...string) *serveProc {
	t.Helper()
	lines := make(chan string, 16)
	args := append([]string{"serve", "--data-dir", dataDir, "--http-addr", httpAddr, "--mqtt-addr", mqttAddr,
		"--log-format", "text"}, extra...)
	p := startProc(t, lines, bins.toolbus, args...)
	l := p.waitLine(t, lines, 30*time.Second, "the line with its addresses", serveLine.MatchString)
	m := serveLine.FindStringSubmatch(l)
	return &serveProc{proc: p, dataDir: dataDir, httpAddr: m[1], mqttAddr: m[2]}
}

// cliToken mints a token with the real CLI (after `toolbus init`, which
// makes the store if it is not there yet) and returns its secret.
func cliToken(t *testing.T, dataDir, user string, extra ...string) string {
	t.Helper()
	if out, err := exec.Command(bins.toolbus, "init", "--data-dir", dataDir).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	args := append([]string{"token", "create", "--data-dir", dataDir, "--user", user}, extra...)
	out, err := exec.Command(bins.toolbus, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// connectMCP opens a go-sdk client session on url; it closes with the test.
func connectMCP(t *testing.T, url, token, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return (&gwEnv{}).connect(t, url, token, version, opts)
}

// waitAgentTool polls tools/list through a fresh session until tool is
// listed: the gateway sees the expert agent online.
func waitAgentTool(t *testing.T, url, token, tool string) {
	t.Helper()
	cs := connectMCP(t, url, token, "2025-11-25", nil)
	poll(t, 40*time.Second, "agent tool "+tool+" listed", func() bool {
		res, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
		if err != nil {
			return false
		}
		for _, tl := range res.Tools {
			if tl.Name == tool {
				return true
			}
		}
		return false
	})
}

// callEcho calls an echo tool (platform_echo or the agent's echo) with a
// text unique to the caller and checks that the answer is that text: a
// call answered with another caller's result is an error of its own kind.
func callEcho(ctx context.Context, cs *mcp.ClientSession, tool, text string) (bool, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
	if err != nil {
		return false, err
	}
	if len(res.Content) == 0 {
		return res.IsError, fmt.Errorf("%s: empty result", tool)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return res.IsError, fmt.Errorf("%s: content %T", tool, res.Content[0])
	}
	if res.IsError {
		return true, &toolError{tc.Text}
	}
	if tc.Text != text {
		return false, &crossedError{sent: text, got: tc.Text}
	}
	return false, nil
}

// toolError is a tool result with isError: true.
type toolError struct{ text string }

func (e *toolError) Error() string { return e.text }

// crossedError is a call answered with a text that was not its own.
type crossedError struct{ sent, got string }

func (e *crossedError) Error() string { return fmt.Sprintf("sent %q, answered %q", e.sent, e.got) }

// refused reports whether a new request to url is turned away: connection
// refused, or 503.
func refused(ctx context.Context, url string) bool {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
	resp, err := c.Do(req)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusServiceUnavailable
}

// portFree reports whether addr can be bound again.
func portFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// countdown calls the reference agent's countdown tool with a progress
// token; started is closed at the first progress notification, so the
// caller knows the agent is working on it.
type countdownCall struct {
	started chan struct{}
	res     *mcp.CallToolResult
	err     error
	done    chan struct{}
}

func startCountdown(t *testing.T, url, token, version string, seconds int) *countdownCall {
	t.Helper()
	c := &countdownCall{started: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	cs := connectMCP(t, url, token, version, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			once.Do(func() { close(c.started) })
		},
	})
	ctx := testCtx(t, 60*time.Second) // a hang fails the test; the calls here take seconds
	p := &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"seconds": seconds}}
	p.SetProgressToken("cd-" + version)
	go func() {
		defer close(c.done)
		c.res, c.err = cs.CallTool(ctx, p)
	}()
	return c
}

func (c *countdownCall) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(70 * time.Second):
		t.Fatalf("%s: the call did not return", what)
	}
}

// loadStats counts the outcomes of a load generator.
type loadStats struct {
	ok, failed, crossed atomic.Int64
	mu                  sync.Mutex
	firstErrs           []string
}

func (s *loadStats) note(err error) {
	switch {
	case err == nil:
		s.ok.Add(1)
		return
	case errors.As(err, new(*crossedError)):
		s.crossed.Add(1)
	default:
		s.failed.Add(1)
	}
	s.mu.Lock()
	if len(s.firstErrs) < 5 {
		s.firstErrs = append(s.firstErrs, err.Error())
	}
	s.mu.Unlock()
}

// runEchoLoad runs one goroutine per session, alternating the platform
// and the agent echo, until stop is closed. Every call has a deadline.
// The returned func waits for the goroutines.
func runEchoLoad(sessions []*mcp.ClientSession, stats *loadStats, stop <-chan struct{}) func() {
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				tool := "echo"
				if n%2 == 0 {
					tool = "platform_echo"
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := callEcho(ctx, cs, tool, fmt.Sprintf("s%d-%d", i, n))
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("hang: %w", err)
				}
				stats.note(err)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // refused at once while the server stops: do not spin
				}
			}
		}()
	}
	return wg.Wait
}

// TestServeSIGTERMDuringLoad: SIGTERM while echo calls run in a loop and
// countdown calls are in flight in the agent. Calls in flight finish (they
// end within --shutdown-timeout); new connections are refused at once;
// every call returns; the process exits 0 and frees its ports; the agent
// comes back when the gateway is started again on the same ports and data.
func TestServeSIGTERMDuringLoad(t *testing.T) {
	dataDir := t.TempDir()
	pw := addAgentIdentity(t, dataDir, "ref-agent")
	tok := cliToken(t, dataDir, "alice")
	gw := startServeProc(t, dataDir, freeAddr(t), freeAddr(t), "--shutdown-timeout", "40s")
	startProc(t, nil, bins.expertAgent, "--broker-url", "tcp://"+gw.mqttAddr, "--username", "ref-agent",
		"--password", pw, "--client-id", "ref-agent-1", "--log-format", "text")
	waitAgentTool(t, gw.mcpURL(), tok, "countdown")

	var sessions []*mcp.ClientSession
	for i := range 6 {
		sessions = append(sessions, connectMCP(t, gw.mcpURL(), tok, protocolVersions[i%len(protocolVersions)], nil))
	}
	var before, after loadStats
	stopBefore := make(chan struct{})
	waitBefore := runEchoLoad(sessions, &before, stopBefore)
	var calls []*countdownCall
	for _, v := range protocolVersions {
		calls = append(calls, startCountdown(t, gw.mcpURL(), tok, v, 4))
	}
	for _, c := range calls {
		select {
		case <-c.started:
		case <-c.done:
			t.Fatalf("countdown returned before it started: %v %+v", c.err, c.res)
		case <-time.After(30 * time.Second):
			t.Fatal("countdown did not start")
		}
	}
	close(stopBefore)
	waitBefore()
	if before.ok.Load() == 0 || before.failed.Load()+before.crossed.Load() != 0 {
		t.Fatalf("before SIGTERM: %d ok, %d failed, %d crossed: %v", before.ok.Load(), before.failed.Load(), before.crossed.Load(), before.firstErrs)
	}

	stopAfter := make(chan struct{})
	waitAfter := runEchoLoad(sessions, &after, stopAfter)
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while the countdowns still drain.
	sawRefused := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !sawRefused; {
		select {
		case err := <-gw.done:
			gw.done <- err
			t.Fatal("toolbus exited before it refused a new connection")
		default:
		}
		sawRefused = refused(testCtx(t, 5*time.Second), gw.mcpURL())
		if !sawRefused {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !sawRefused {
		t.Fatal("new connections were still accepted after SIGTERM")
	}
	for i, c := range calls {
		c.wait(t, "countdown "+protocolVersions[i])
		if c.err != nil || c.res.IsError {
			t.Errorf("countdown %s in flight at SIGTERM: err %v, result %+v", protocolVersions[i], c.err, c.res)
		}
	}
	if err := gw.stop(t, syscall.SIGTERM, 45*time.Second); err != nil {
		t.Fatalf("toolbus exit after SIGTERM: %v", err)
	}
	close(stopAfter)
	waitAfter()
	if after.crossed.Load() != 0 {
		t.Fatalf("after SIGTERM, %d calls got another caller's answer: %v", after.crossed.Load(), after.firstErrs)
	}
	t.Logf("during shutdown: %d calls answered, %d failed (e.g. %v)", after.ok.Load(), after.failed.Load(), after.firstErrs)
	for _, addr := range []string{gw.httpAddr, gw.mqttAddr} {
		if !portFree(addr) {
			t.Errorf("port %s still bound after exit", addr)
		}
	}

	// The same data directory and ports: the token still works and the
	// agent, which kept retrying, is back.
	gw2 := startServeProc(t, dataDir, gw.httpAddr, gw.mqttAddr)
	waitAgentTool(t, gw2.mcpURL(), tok, "countdown")
	cs := connectMCP(t, gw2.mcpURL(), tok, "2025-11-25", nil)
	if _, err := callEcho(testCtx(t, 20*time.Second), cs, "echo", "back"); err != nil {
		t.Fatalf("echo after restart: %v", err)
	}
	if err := gw2.stop(t, syscall.SIGTERM, 45*time.Second); err != nil {
		t.Fatalf("second toolbus exit: %v", err)
	}
}

// TestServeSIGTERMPastShutdownTimeout: a call that would outlast
// --shutdown-timeout is failed with a tool error that says the gateway is
// stopping, instead of being cut, and the process still exits 0.
func TestServeSIGTERMPastShutdownTimeout(t *testing.T) {
	dataDir := t.TempDir()
	pw := addAgentIdentity(t, dataDir, "ref-agent")
	tok := cliToken(t, dataDir, "alice")
	gw := startServeProc(t, dataDir, "127.0.0.1:0", "127.0.0.1:0", "--shutdown-timeout", "8s")
	startProc(t, nil, bins.expertAgent, "--broker-url", "tcp://"+gw.mqttAddr, "--username", "ref-agent",
		"--password", pw, "--client-id", "ref-agent-1", "--log-format", "text")
	waitAgentTool(t, gw.mcpURL(), tok, "countdown")

	var calls []*countdownCall
	for _, v := range protocolVersions {
		calls = append(calls, startCountdown(t, gw.mcpURL(), tok, v, 120))
	}
	for _, c := range calls {
		select {
		case <-c.started:
		case <-time.After(30 * time.Second):
			t.Fatal("countdown did not start")
		}
	}
	if err := gw.stop(t, syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("toolbus exit after SIGTERM with calls past the shutdown timeout: %v", err)
	}
	for i, c := range calls {
		c.wait(t, "countdown "+protocolVersions[i])
		switch {
		case c.err != nil:
			t.Errorf("countdown %s: the call was cut (%v); want a tool error saying the gateway stops", protocolVersions[i], c.err)
		case !c.res.IsError:
			t.Errorf("countdown %s finished? %+v", protocolVersions[i], c.res)
		default:
			if txt := c.res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "shutting down") {
				t.Errorf("countdown %s: %q does not say the gateway is shutting down", protocolVersions[i], txt)
			}
		}
	}
}

// TestShutdownCleansUp runs the same shutdown in process, where the
// requester and the broker can be asked: after Shutdown under load, no
// call is pending, every context's reply subscription and the presence
// subscription are gone from the broker.
func TestShutdownCleansUp(t *testing.T) {
	e := startGateway(t, server.Config{MaxContexts: 8})
	tok := e.token(t, store.TokenSpec{UserID: "alice"})
	var sessions []*mcp.ClientSession
	for i := range 12 { // more sessions than MaxContexts: evictions run too
		sessions = append(sessions, e.connect(t, e.mcpURL(), tok, protocolVersions[i%len(protocolVersions)], nil))
	}
	var stats loadStats
	stop := make(chan struct{})
	wait := runEchoLoad(sessions, &stats, stop)
	poll(t, 20*time.Second, "some calls answered", func() bool { return stats.ok.Load() >= 50 })

	req, b := e.srv.Requester(), e.srv.Broker()
	var topics []string
	for _, c := range req.AllContexts() {
		topics = append(topics, c.Context.ReplyFilter())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown under load: %v", err)
	}
	close(stop)
	wait()
	if n := stats.crossed.Load(); n != 0 {
		t.Fatalf("%d calls got another caller's answer: %v", n, stats.firstErrs)
	}
	st := req.Stats()
	if st.Pending != 0 || st.Contexts != 0 {
		t.Errorf("after shutdown: %d calls pending, %d contexts subscribed", st.Pending, st.Contexts)
	}
	if st.Subscribes != st.Unsubscribes {
		t.Errorf("after shutdown: %d subscribes, %d unsubscribes", st.Subscribes, st.Unsubscribes)
	}
	for _, topic := range append(topics, contract.PresenceFilter) {
		if b.InlineSubscribed(topic) {
			t.Errorf("after shutdown the gateway still holds %s", topic)
		}
	}
	t.Logf("%d calls answered, %d failed around the shutdown", stats.ok.Load(), stats.failed.Load())
}

// TestServeRestartKeepsStore: tokens, MQTT identities and topic rules
// written before a stop are in force after a start on the same data
// directory.
func TestServeRestartKeepsStore(t *testing.T) {
	dataDir := t.TempDir()
	pw := addAgentIdentity(t, dataDir, "ref-agent")
	tok := cliToken(t, dataDir, "alice", "--scopes", "tools:list,tools:call")
	roTok := cliToken(t, dataDir, "bob", "--read-only")
	// A rule for a platform identity, written through the store as the
	// operator API would (the CLI has no rule command yet).
	st, err := store.Open(testCtx(t, 10*time.Second), dataDir, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	if _, err := st.AddIdentity(ctx, "watcher", acl.RolePlatform, []byte("watcher-password-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddRule(ctx, acl.Rule{Username: "watcher", Access: acl.AccessRead, Filter: "ops/alerts/#"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	for round := 1; round <= 2; round++ {
		gw := startServeProc(t, dataDir, "127.0.0.1:0", "127.0.0.1:0")
		agent := startProc(t, nil, bins.expertAgent, "--broker-url", "tcp://"+gw.mqttAddr, "--username", "ref-agent",
			"--password", pw, "--client-id", "ref-agent-1", "--log-format", "text")
		waitAgentTool(t, gw.mcpURL(), tok, "echo") // the identity logs in, the token authenticates
		cs := connectMCP(t, gw.mcpURL(), tok, "2025-11-25", nil)
		if _, err := callEcho(testCtx(t, 20*time.Second), cs, "echo", fmt.Sprintf("round %d", round)); err != nil {
			t.Fatalf("round %d: echo: %v", round, err)
		}
		// The read-only flag is part of the token that survived.
		ro := connectMCP(t, gw.mcpURL(), roTok, "2025-11-25", nil)
		if _, err := callEcho(testCtx(t, 20*time.Second), ro, "platform_echo", "ro"); err != nil {
			t.Fatalf("round %d: read-only token, read-only tool: %v", round, err)
		}

		// The rule applies: watcher may subscribe to ops/alerts/# and not
		// to ops/other.
		c, err := mqttClientAt(t, gw.mqttAddr, "watcher", "watcher-password-1", fmt.Sprintf("watcher-%d", round), nil)
		if err != nil {
			t.Fatalf("round %d: watcher login: %v", round, err)
		}
		codes := suback(t, c, []string{"ops/alerts/x", "ops/other"}, nil)
		if codes["ops/alerts/x"] >= 0x80 || codes["ops/other"] < 0x80 {
			t.Fatalf("round %d: SUBACK codes %v, want ops/alerts/x granted and ops/other refused", round, codes)
		}
		c.Disconnect(100)

		if err := agent.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
			t.Fatalf("agent exit: %v", err)
		}
		if err := gw.stop(t, syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatalf("round %d: toolbus exit: %v", round, err)
		}
	}
}

// mqttClientAt logs in to the broker at addr (host:port), with opt (if
// not nil) applied to the options; the client disconnects with the test.
func mqttClientAt(t *testing.T, addr, user, pass, clientID string, opt func(*paho.ClientOptions)) (paho.Client, error) {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker("tcp://" + addr).
		SetClientID(clientID).SetUsername(user).SetPassword(pass).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).SetCleanSession(true)
	if opt != nil {
		opt(opts)
	}
	c := paho.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c, nil
}

// TestServeRefusesToStart: a bad flag value or a data directory the store
// cannot use stops `toolbus serve` at once with a message that names the
// fault and a non-zero exit status.
func TestServeRefusesToStart(t *testing.T) {
	notADir := t.TempDir() + "/file"
	if err := exec.Command("touch", notADir).Run(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad duration", []string{"--call-timeout", "soon"}, "call-timeout"},
		{"bad integer", []string{"--max-contexts", "many"}, "max-contexts"},
		{"bad log level", []string{"--log-level", "loud"}, "loud"},
		{"bad platform id", []string{"--platform-id", "a/b"}, "platform id"},
		{"unknown flag", []string{"--no-such-flag"}, "no-such-flag"},
		{"data dir is a file", []string{"--data-dir", notADir}, notADir},
		{"bad http address", []string{"--http-addr", "256.0.0.1:80"}, "256.0.0.1"},
		{"negative GC heap floor", []string{"--gc-heap-floor-mib", "-1"}, "gc-heap-floor-mib"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0"}, c.args...)
			cmd := exec.CommandContext(testCtx(t, 30*time.Second), bins.toolbus, args...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("toolbus serve %v: err %v, want a non-zero exit\n%s", c.args, err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("toolbus serve %v: output does not name %q:\n%s", c.args, c.want, out)
			}
		})
	}
}
