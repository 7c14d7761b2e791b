package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"go.uber.org/goleak"
)

// testDeadline bounds every wait in these tests.
const testDeadline = 15 * time.Second

// checkLeaks fails the test if it leaves goroutines behind; registered
// first, it runs after every other cleanup.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// seen is what the backend received in one request.
type seen struct {
	method, path, query, host, body string
	header                          http.Header
}

// recorder is a backend that records requests and answers with a fixed reply.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, string(body), r.Header.Clone()})
	rec.mu.Unlock()
	w.Header().Set("Mcp-Session-Id", "session-1")
	w.Header().Set("Content-Type", "application/json")
	status := http.StatusOK
	if r.Host == "evil.example.com" {
		status = http.StatusForbidden
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
}

func (rec *recorder) last(t *testing.T) seen {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("the backend saw no request")
	}
	return rec.reqs[len(rec.reqs)-1]
}

// startBackend serves h on a real loopback socket.
func startBackend(t *testing.T, h http.Handler) *url.URL {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// startProxy starts the proxy on 127.0.0.1:0 in front of target.
func startProxy(t *testing.T, target *url.URL, token string) string {
	t.Helper()
	return startProxyLog(t, target, token, nil)
}

func startProxyLog(t *testing.T, target *url.URL, token string, log *logrus.Entry) string {
	t.Helper()
	p, err := start("127.0.0.1:0", target, token, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return "http://" + p.Addr().String()
}

// newClient has no environment proxy and its own connections, closed at cleanup.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: testDeadline}
}

func TestProxyForwardsHeadersAndAddsToken(t *testing.T) {
	checkLeaks(t)
	rec := &recorder{}
	proxyURL := startProxy(t, startBackend(t, rec), "tok-123")
	proxyHost := strings.TrimPrefix(proxyURL, "http://")
	_, port, _ := net.SplitHostPort(proxyHost)
	client := newClient(t)

	tests := []struct {
		name       string
		method     string
		host       string            // "" = the proxy's own address
		header     map[string]string // sent by the client
		wantStatus int
	}{
		{name: "suite request with loopback Host and Origin", method: http.MethodPost, host: "localhost:" + port,
			header: map[string]string{"Origin": "http://localhost:" + port, "Mcp-Protocol-Version": "2025-11-25",
				"Mcp-Method": "initialize", "Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
			wantStatus: http.StatusOK},
		{name: "foreign Host and Origin reach the gateway unchanged", method: http.MethodPost, host: "evil.example.com",
			header:     map[string]string{"Origin": "http://evil.example.com", "Content-Type": "application/json"},
			wantStatus: http.StatusForbidden},
		{name: "no Origin stays absent", method: http.MethodGet, header: map[string]string{"Accept": "text/event-stream"},
			wantStatus: http.StatusOK},
		{name: "client Authorization is replaced", method: http.MethodDelete,
			header:     map[string]string{"Authorization": "Bearer client-token", "Mcp-Session-Id": "abc"},
			wantStatus: http.StatusOK},
		{name: "Accept-Encoding passes as sent", method: http.MethodPost,
			header:     map[string]string{"Accept-Encoding": "identity", "X-Custom": "v1"},
			wantStatus: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
			req, err := http.NewRequestWithContext(ctx, tc.method, proxyURL+"/api/v1/mcp?x=1&y=%2F", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			wantHost := proxyHost
			if tc.host != "" {
				req.Host = tc.host
				wantHost = tc.host
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			respBody, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if got := resp.Header.Get("Mcp-Session-Id"); got != "session-1" {
				t.Errorf("response Mcp-Session-Id = %q, want session-1", got)
			}
			if string(respBody) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
				t.Errorf("response body = %q", respBody)
			}

			got := rec.last(t)
			if got.method != tc.method || got.path != "/api/v1/mcp" || got.query != "x=1&y=%2F" || got.body != body {
				t.Errorf("backend saw %s %s?%s body %q", got.method, got.path, got.query, got.body)
			}
			if got.host != wantHost {
				t.Errorf("backend Host = %q, want %q", got.host, wantHost)
			}
			if auth := got.header.Values("Authorization"); len(auth) != 1 || auth[0] != "Bearer tok-123" {
				t.Errorf("backend Authorization = %q, want exactly [Bearer tok-123]", auth)
			}
			for k, v := range tc.header {
				if k == "Authorization" {
					continue
				}
				if vs := got.header.Values(k); len(vs) != 1 || vs[0] != v {
					t.Errorf("backend %s = %q, want [%q]", k, vs, v)
				}
			}
			if _, ok := tc.header["Origin"]; !ok {
				if o, present := got.header["Origin"]; present {
					t.Errorf("backend got Origin %q; the client sent none", o)
				}
			}
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
				if v, present := got.header[k]; present {
					t.Errorf("backend got %s %q: the proxy must not add headers besides Authorization", k, v)
				}
			}
		})
	}
}

// TestProxyFlushesSSEChunks holds the backend's stream open after each event
// until the client has read it through the proxy: a proxy that buffered
// would never deliver the event, and the read would hit the test deadline.
func TestProxyFlushesSSEChunks(t *testing.T) {
	checkLeaks(t)
	const events = 3
	next := make(chan struct{}) // the client read an event: send the next one
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for i := range events {
			fmt.Fprintf(w, "id: %d\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":%d}}\n\n", i, i*50)
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			case <-time.After(testDeadline):
				return
			}
		}
	})
	proxyURL := startProxy(t, startBackend(t, backend), "tok")

	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL+"/api/v1/mcp", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if resp.ContentLength != -1 {
		t.Errorf("ContentLength = %d, want -1 (streamed)", resp.ContentLength)
	}
	r := bufio.NewReader(resp.Body)
	for i := range events {
		ev := readEvent(t, r)
		want := fmt.Sprintf("id: %d\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":%d}}\n", i, i*50)
		if ev != want {
			t.Fatalf("event %d = %q, want %q", i, ev, want)
		}
		select {
		case next <- struct{}{}:
		case <-ctx.Done():
			t.Fatalf("backend did not wait for event %d to be read: %v", i, ctx.Err())
		}
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after the last event: %q, %v", rest, err)
	}
}

// readEvent reads one SSE event (up to the blank line) or fails the test
// when the stream errs or the client's deadline passes.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading event: %v (read so far %q)", err, b.String())
		}
		if line == "\n" {
			return b.String()
		}
		b.WriteString(line)
	}
}

// TestProxyClientCancelReachesBackend: the suite closes streams it is done
// with, and the gateway must see that (it cancels the agent's work).
func TestProxyClientCancelReachesBackend(t *testing.T) {
	checkLeaks(t)
	started, gone := make(chan struct{}), make(chan struct{})
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		close(started)
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(testDeadline):
		}
	})
	proxyURL := startProxy(t, startBackend(t, backend), "tok")
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	reqCtx, cancelReq := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, proxyURL+"/api/v1/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the backend never started the stream")
	}
	cancelReq()
	resp.Body.Close()
	select {
	case <-gone:
	case <-ctx.Done():
		t.Fatal("the backend's request context was not cancelled after the client went away")
	}
}

func TestProxyGatewayDown(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	ln.Close() // nothing listens there now
	proxyURL := startProxy(t, dead, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL+"/api/v1/mcp", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status = %d, want 502", resp.StatusCode)
	}
}

// TestProxyAbortsWhenTheGatewayCutsAStream: a stream the gateway breaks off
// must break off for the client too (not end cleanly), and the proxy log
// must say so.
func TestProxyAbortsWhenTheGatewayCutsAStream(t *testing.T) {
	checkLeaks(t)
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {}\n\n")
		_ = http.NewResponseController(w).Flush()
		// Drop the connection without the chunked terminator.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	logger, hook := logtest.NewNullLogger()
	proxyURL := startProxyLog(t, startBackend(t, backend), "tok", logrus.NewEntry(logger))
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL+"/api/v1/mcp", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Method", "tools/list")
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("the client read %q and a clean end; want the stream broken off", body)
	}
	var aborted *logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Message == "response aborted" {
			aborted = e
		}
	}
	if aborted == nil {
		t.Fatalf("no \"response aborted\" entry in %d log entries", len(hook.AllEntries()))
	}
	if aborted.Data["mcpMethod"] != "tools/list" || aborted.Data["status"] != http.StatusOK {
		t.Errorf("log fields = %v", aborted.Data)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{name: "flags", args: []string{"--target", "http://127.0.0.1:8080", "--token", "t", "--listen", "127.0.0.1:9", "--log-format", "text"},
			check: func(t *testing.T, c config) {
				if c.target.String() != "http://127.0.0.1:8080" || c.token != "t" || c.listen != "127.0.0.1:9" || c.logFormat != "text" {
					t.Errorf("config = %+v", c)
				}
			}},
		{name: "environment", env: map[string]string{"TOOLBUS_PROXY_TOKEN": "secret", "TOOLBUS_PROXY_TARGET": "http://127.0.0.1:1"},
			check: func(t *testing.T, c config) {
				if c.token != "secret" || c.target.Host != "127.0.0.1:1" || c.listen != "127.0.0.1:0" {
					t.Errorf("config = %+v", c)
				}
			}},
		{name: "flag wins over environment", args: []string{"--token", "flag", "--target", "http://h:1"},
			env: map[string]string{"TOOLBUS_PROXY_TOKEN": "env"},
			check: func(t *testing.T, c config) {
				if c.token != "flag" {
					t.Errorf("token = %q", c.token)
				}
			}},
		{name: "no target", args: []string{"--token", "t"}, wantErr: "--target is required"},
		{name: "bad target", args: []string{"--token", "t", "--target", "127.0.0.1:8080"}, wantErr: "--target"},
		{name: "no token", args: []string{"--target", "http://h:1"}, wantErr: "TOOLBUS_PROXY_TOKEN"},
		{name: "bad log level", args: []string{"--target", "http://h:1", "--token", "t", "--log-level", "loud"}, wantErr: "--log-level"},
		{name: "stray argument", args: []string{"--target", "http://h:1", "--token", "t", "x"}, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			c, err := parseFlags(tc.args, getenv, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	if _, err := parseFlags([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err = %v, want flag.ErrHelp", err)
	}
}

// TestRun starts the command as the script does, reads the address it
// prints, sends a request through it and stops it with its context.
func TestRun(t *testing.T) {
	checkLeaks(t)
	rec := &recorder{}
	target := startBackend(t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()

	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(runCtx, []string{"--target", target.String()}, func(k string) string {
			if k == "TOOLBUS_PROXY_TOKEN" {
				return "from-env"
			}
			return ""
		}, pw, io.Discard)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, pr)
	}()
	var line string
	select {
	case line = <-lines:
	case <-ctx.Done():
		t.Fatal("run printed no address")
	}
	m := regexp.MustCompile(`^conformance-proxy: (http://127\.0\.0\.1:\d+) -> ` + regexp.QuoteMeta(target.String()) + "\n$").FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line = %q", line)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m[1]+"/api/v1/mcp", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := rec.last(t).header.Get("Authorization"); got != "Bearer from-env" {
		t.Errorf("Authorization = %q", got)
	}
	stop()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after its context ended")
	}
}

// TestFullDuplexKeepsTheBodyReadable: the transport may read the client's
// body once more after the gateway's answer has begun (see fullDuplex).
// Without fullDuplex, Go's server has closed the body by then.
func TestFullDuplexKeepsTheBodyReadable(t *testing.T) {
	checkLeaks(t)
	tests := []struct {
		name    string
		wrap    func(http.Handler) http.Handler
		wantErr bool
	}{
		{name: "fullDuplex", wrap: fullDuplex},
		{name: "plain server (the failure fullDuplex prevents)", wrap: func(h http.Handler) http.Handler { return h }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				body string
				err  error
			}
			results := make(chan result, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				_ = http.NewResponseController(w).Flush()
				b, err := io.ReadAll(r.Body)
				results <- result{string(b), err}
			})
			u := startBackend(t, tc.wrap(h))
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(`{"jsonrpc":"2.0"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := newClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var res result
			select {
			case res = <-results:
			case <-ctx.Done():
				t.Fatal("the handler did not report")
			}
			if tc.wantErr {
				if res.err == nil {
					t.Errorf("read %q after the answer began; the plain server allowed it, so this test no longer shows why fullDuplex is there", res.body)
				}
				return
			}
			if res.err != nil || res.body != `{"jsonrpc":"2.0"}` {
				t.Errorf("read %q, %v after the answer began", res.body, res.err)
			}
		})
	}
}
