package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/h1"
)

// waitFor bounds every single wait of a test.
const waitFor = 10 * time.Second

// handler answers in the style its X-Mode header asks for, and reports in
// its body what it saw of the request. X-Writer names its ResponseWriter,
// so that a test can tell which server answered.
func handler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Writer", fmt.Sprintf("%T", w))
	switch r.Header.Get("X-Mode") {
	case "noread": // refuses without reading the body, as the gateway's checks do
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "no")
		return
	case "closebody": // closes the body unread
		_ = r.Body.Close()
		_, _ = io.WriteString(w, "closed")
		return
	case "leftover": // a goroutine reads the body after the handler returns
		go func() { _, _ = io.ReadAll(r.Body) }()
		_, _ = io.WriteString(w, "left")
		return
	}
	body, err := io.ReadAll(r.Body)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var seen strings.Builder
	fmt.Fprintf(&seen, "%s %s host=%s len=%d close=%v body=%q err=%s\n", r.Method, r.URL.Path, r.Host, r.ContentLength, r.Close, body, errKind(err))
	for _, k := range keys {
		fmt.Fprintf(&seen, "%s=%q\n", k, r.Header[k])
	}
	out := seen.String()
	switch r.Header.Get("X-Mode") {
	case "declared":
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = io.WriteString(w, out)
	case "big": // more than the fast path buffers: chunked
		_, _ = io.WriteString(w, out)
		_, _ = w.Write(bytes.Repeat([]byte("x"), 10000))
	case "flush":
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: one\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, out)
	case "status":
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, out)
	case "empty":
		w.WriteHeader(http.StatusAccepted)
	case "nocontent":
		w.WriteHeader(http.StatusNoContent)
		if _, err := io.WriteString(w, "not allowed"); !errors.Is(err, http.ErrBodyNotAllowed) {
			panic(fmt.Sprintf("a body on 204: %v", err))
		}
	case "split":
		w.Header().Set("X-Evil", "a\r\nInjected: b")
		w.Header()["Bad Name"] = []string{"x"}
		_, _ = io.WriteString(w, out)
	case "short": // declares more than it writes
		w.Header().Set("Content-Length", "1000")
		_, _ = io.WriteString(w, "short")
	case "panic":
		panic(http.ErrAbortHandler)
	case "hints": // an informational response first, whose framing fields net/http leaves out
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Content-Length")
		_, _ = io.WriteString(w, out)
	case "switching": // 101 is final
		w.WriteHeader(http.StatusSwitchingProtocols)
	case "connclose": // net/http closes on "close" only, case and all
		w.Header().Set("Connection", "Close")
		_, _ = io.WriteString(w, out)
	case "connclose-lower":
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, out)
	case "bigfirst": // one first write past the buffer: its type is sniffed from it
		_, _ = io.WriteString(w, "<html><body>"+strings.Repeat("h", 5000))
	case "sniffsplit": // the type is sniffed from what was buffered and the write past it
		_, _ = io.WriteString(w, "\n\n")
		_, _ = io.WriteString(w, "<html><body>"+strings.Repeat("h", 3000))
	case "encoded": // no sniffing under a Content-Encoding
		w.Header().Set("Content-Encoding", "x-custom")
		_, _ = io.WriteString(w, "<html><body>hi</body></html>")
	case "mid": // between net/http's 2 KiB buffer and 4 KiB: chunked
		_, _ = io.WriteString(w, strings.Repeat("m", 3000))
	case "notmodified":
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "10")
		w.WriteHeader(http.StatusNotModified)
	case "late": // fields set after WriteHeader do not reach the client
		w.WriteHeader(http.StatusOK)
		w.Header().Set("X-Late", "1")
		_, _ = io.WriteString(w, out)
	default: // a body of unknown length, small: its length is computed
		_, _ = io.WriteString(w, out)
	}
}

// errKind names err without the addresses net/http's errors carry.
func errKind(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	default:
		return "other"
	}
}

// servers runs handler behind the fast path (fast) and on net/http alone
// (plain), each on 127.0.0.1 with an OS-chosen port.
func servers(t testing.TB, mod func(*http.Server)) (fast, plain string) {
	t.Helper()
	start := func(serve func(net.Listener) error, stop func(context.Context) error) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := stop(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("serve returned %v", err)
			}
		})
		return ln.Addr().String()
	}
	newHTTP := func() *http.Server {
		s := &http.Server{Handler: http.HandlerFunc(handler), ReadHeaderTimeout: waitFor, IdleTimeout: waitFor}
		if mod != nil {
			mod(s)
		}
		return s
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	f := h1.New(newHTTP(), h1.Options{Paths: []string{"/mcp"}, Logger: logrus.NewEntry(quiet)})
	p := newHTTP()
	return start(f.Serve, f.Shutdown), start(p.Serve, p.Shutdown)
}

// exchange writes raw on a new connection and reads responses until the
// server closes it or n have come.
func exchange(t testing.TB, addr, raw string, n int) []*http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitFor))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for len(out) < n {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				break
			}
			t.Fatalf("read response %d: %v", len(out), err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("read body %d: %v", len(out), err)
		}
		res.Body = io.NopCloser(bytes.NewReader(b))
		out = append(out, res)
	}
	return out
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// summary is what a client can see of a response, less the Date and the
// X-Writer, which differ.
func summary(t testing.TB, res *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(res.Body)
	h := res.Header.Clone()
	h.Del("Date")
	h.Del("X-Writer")
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var s strings.Builder
	fmt.Fprintf(&s, "%s length=%d chunked=%v close=%v\n", res.Status, res.ContentLength, slices.Contains(res.TransferEncoding, "chunked"), res.Close)
	for _, k := range keys {
		fmt.Fprintf(&s, "%s: %q\n", k, h[k])
	}
	fmt.Fprintf(&s, "\n%q", b)
	return s.String()
}

// sameAnswers sends raw to both servers and wants the same responses from
// each; it returns those behind the fast path.
func sameAnswers(t testing.TB, fast, plain, raw string, n int) []*http.Response {
	t.Helper()
	got := exchange(t, fast, raw, n)
	want := exchange(t, plain, raw, n)
	if len(got) != len(want) {
		t.Fatalf("%d responses behind the fast path, %d from net/http", len(got), len(want))
	}
	for i := range got {
		if g, w := summary(t, got[i]), summary(t, want[i]); g != w {
			t.Errorf("response %d behind the fast path:\n%s\nfrom net/http:\n%s", i, g, w)
		}
	}
	return got
}

const fastWriter, plainWriter = "*h1.response", "*http.response"

func post(path, headers, body string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: example.test\r\n" + headers +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// The fast path answers what it takes as net/http would, and hands
// everything else to net/http, whose answers are then exactly net/http's
// own.
func TestSameAsNetHTTP(t *testing.T) {
	fast, plain := servers(t, nil)
	bigHead := "X-Big: " + strings.Repeat("b", 5000) + "\r\n"
	for _, tc := range []struct {
		name    string
		raw     string
		n       int      // responses to read
		writers []string // which served each, behind the fast path
	}{
		{"small body, length computed", post("/mcp", "", `{"a":1}`), 1, []string{fastWriter}},
		{"length declared", post("/mcp", "X-Mode: declared\r\n", "{}"), 1, []string{fastWriter}},
		{"big body, chunked", post("/mcp", "X-Mode: big\r\n", "{}"), 1, []string{fastWriter}},
		{"flushed, chunked", post("/mcp", "X-Mode: flush\r\n", "{}"), 1, []string{fastWriter}},
		{"status", post("/mcp", "X-Mode: status\r\n", "{}"), 1, []string{fastWriter}},
		{"no body", post("/mcp", "X-Mode: empty\r\n", ""), 1, []string{fastWriter}},
		{"204", post("/mcp", "X-Mode: nocontent\r\n", "{}"), 1, []string{fastWriter}},
		{"response splitting", post("/mcp", "X-Mode: split\r\n", "{}"), 1, []string{fastWriter}},
		{"client closes", post("/mcp", "Connection: close\r\n", "{}") + post("/mcp", "", "unread"), 2, []string{fastWriter}},
		{"fields", post("/mcp", "Authorization: Bearer t\r\nmcp-session-id: s1\r\nX-Two: 1\r\nx-two: 2\r\nUser-Agent: \xffua\r\n", "{}"), 1, []string{fastWriter}},
		{"pipelined", post("/mcp", "", "one") + post("/mcp", "X-Mode: declared\r\n", "two") + post("/mcp", "", ""), 3,
			[]string{fastWriter, fastWriter, fastWriter}},
		{"GET", "GET /mcp HTTP/1.1\r\nHost: example.test\r\n\r\n", 1, []string{plainWriter}},
		{"other path", post("/other", "", "{}"), 1, []string{plainWriter}},
		{"chunked request", "POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 1, []string{plainWriter}},
		{"length and chunked", "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 1, nil},
		{"two lengths", "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 1, nil},
		{"bare LF", "POST /mcp HTTP/1.1\nHost: a\nContent-Length: 2\n\n{}", 1, []string{plainWriter}},
		{"obs-fold", "POST /mcp HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\nContent-Length: 2\r\n\r\n{}", 1, nil},
		{"no host", "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 1, nil},
		{"HTTP/1.0", "POST /mcp HTTP/1.0\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}", 1, []string{plainWriter}},
		{"expect", "POST /mcp HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", 2, []string{"", plainWriter}},
		{"head larger than the buffer", post("/mcp", bigHead, "{}"), 1, []string{plainWriter}},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 1, nil},
		{"fast, then handed over", post("/mcp", "", "1") + "GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n" + post("/mcp", "", "3"), 3,
			[]string{fastWriter, plainWriter, plainWriter}},
		{"aborted by the handler", post("/mcp", "X-Mode: panic\r\n", "{}"), 1, nil},
		{"CRLF after a POST", post("/mcp", "", "1") + "\r\n" + post("/mcp", "", "2"), 2, []string{fastWriter, fastWriter}},
		{"body not read", post("/mcp", "X-Mode: noread\r\n", "{}") + post("/mcp", "", "2"), 2, []string{fastWriter, fastWriter}},
		{"body not read, too big to drain", post("/mcp", "X-Mode: noread\r\n", strings.Repeat("b", 300<<10)), 2, []string{fastWriter}},
		{"body closed unread", post("/mcp", "X-Mode: closebody\r\n", "{}") + post("/mcp", "", "2"), 2, []string{fastWriter, fastWriter}},
		{"body closed unread, too big to drain", post("/mcp", "X-Mode: closebody\r\n", strings.Repeat("b", 300<<10)) + post("/mcp", "", "2"), 2, []string{fastWriter}},
		{"handler closes, lower case", post("/mcp", "X-Mode: connclose-lower\r\n", "{}") + post("/mcp", "", "2"), 2, []string{fastWriter}},
		{"body read after the handler", post("/mcp", "X-Mode: leftover\r\n", "{}") + post("/mcp", "", "2"), 2, nil},
		{"early hints", post("/mcp", "X-Mode: hints\r\n", "{}"), 2, []string{fastWriter, fastWriter}},
		{"101", post("/mcp", "X-Mode: switching\r\n", "{}"), 1, []string{fastWriter}},
		{"handler says Close", post("/mcp", "X-Mode: connclose\r\n", "{}") + post("/mcp", "", "2"), 2, []string{fastWriter, fastWriter}},
		{"big first write", post("/mcp", "X-Mode: bigfirst\r\n", "{}"), 1, []string{fastWriter}},
		{"between 2 and 4 KiB", post("/mcp", "X-Mode: mid\r\n", "{}"), 1, []string{fastWriter}},
		{"sniffed across writes", post("/mcp", "X-Mode: sniffsplit\r\n", "{}"), 1, []string{fastWriter}},
		{"encoded, not sniffed", post("/mcp", "X-Mode: encoded\r\n", "{}"), 1, []string{fastWriter}},
		{"304", post("/mcp", "X-Mode: notmodified\r\n", "{}"), 1, []string{fastWriter}},
		{"fields after WriteHeader", post("/mcp", "X-Mode: late\r\n", "{}"), 1, []string{fastWriter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sameAnswers(t, fast, plain, tc.raw, tc.n)
			for i := range got {
				if tc.writers != nil {
					if w := got[i].Header.Get("X-Writer"); w != tc.writers[i] {
						t.Errorf("response %d written by %s, want %s", i, w, tc.writers[i])
					}
				}
			}
		})
	}
}

// blocking is a fast-path server whose handler, for X-Mode: block, tells
// started and waits for release or its context's end (which it tells
// ended).
type blocking struct {
	addr    string
	srv     *h1.Server
	served  chan error
	started chan struct{}
	release chan struct{}
	ended   chan error
	watches chan struct{}
}

func startBlocking(t *testing.T) *blocking {
	t.Helper()
	b := &blocking{
		served:  make(chan error, 1),
		started: make(chan struct{}, 8),
		release: make(chan struct{}),
		ended:   make(chan error, 8),
		watches: make(chan struct{}, 8),
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Mode") != "block" {
			handler(w, r)
			return
		}
		_, _ = io.ReadAll(r.Body)
		b.started <- struct{}{}
		select {
		case <-b.release:
			_, _ = io.WriteString(w, "released")
		case <-r.Context().Done():
			b.ended <- r.Context().Err()
		case <-time.After(waitFor):
			b.ended <- errors.New("neither released nor cancelled")
		}
	})
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	b.srv = h1.New(&http.Server{Handler: h, ReadHeaderTimeout: waitFor, IdleTimeout: waitFor},
		h1.Options{Paths: []string{"/mcp"}, WatchAfter: time.Millisecond, Logger: logrus.NewEntry(quiet)})
	h1.OnWatch(b.srv, func() { b.watches <- struct{}{} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	go func() { b.served <- b.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = b.srv.Close()
		if err := <-b.served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve returned %v", err)
		}
	})
	return b
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out after %s waiting for %s", waitFor, what)
		panic("unreachable")
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitFor))
	return c
}

// watchedRequest sends a request that blocks on a new connection, and
// returns the connection once the handler runs and the watch reads.
func (b *blocking) watchedRequest(t *testing.T) net.Conn {
	t.Helper()
	c := dial(t, b.addr)
	if _, err := io.WriteString(c, post("/mcp", "X-Mode: block\r\n", "{}")); err != nil {
		t.Fatal(err)
	}
	recv(t, b.started, "the handler")
	recv(t, b.watches, "the watch")
	return c
}

// A client that goes away while its request runs cancels the request's
// context, as with net/http; the watch that notices it starts only once
// the request has run for WatchAfter.
func TestClientGoneCancelsRequest(t *testing.T) {
	b := startBlocking(t)
	c := b.watchedRequest(t)
	_ = c.Close()
	if err := recv(t, b.ended, "the request's end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the request ended with %v, want its context cancelled", err)
	}
}

// A client that sends its next request while the watch reads loses
// nothing: the byte the watch read is the next request's first.
func TestPipelinedWhileWatched(t *testing.T) {
	b := startBlocking(t)
	c := b.watchedRequest(t)
	if _, err := io.WriteString(c, post("/mcp", "", "second")); err != nil {
		t.Fatal(err)
	}
	close(b.release)
	br := bufio.NewReader(c)
	for i, want := range []string{"released", `body="second"`} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		if !strings.Contains(string(body), want) {
			t.Fatalf("response %d: %q, want it to hold %q", i, body, want)
		}
	}
	select {
	case err := <-b.ended:
		t.Fatalf("the first request ended with %v", err)
	default:
	}
}

// Shutdown closes idle connections, lets the request in flight finish
// (and closes its connection after it), shuts the handed-over connections
// down through net/http, and makes Serve return ErrServerClosed.
func TestShutdown(t *testing.T) {
	b := startBlocking(t)
	idle := dial(t, b.addr)
	if res := exchangeOn(t, idle, post("/mcp", "", "{}")); res.StatusCode != http.StatusOK {
		t.Fatalf("idle connection's request: %s", res.Status)
	}
	handed := dial(t, b.addr)
	if res := exchangeOn(t, handed, "GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n"); res.Header.Get("X-Writer") != plainWriter {
		t.Fatalf("GET answered by %s", res.Header.Get("X-Writer"))
	}
	busy := dial(t, b.addr)
	if _, err := io.WriteString(busy, post("/mcp", "X-Mode: block\r\n", "{}")); err != nil {
		t.Fatal(err)
	}
	recv(t, b.started, "the handler")
	if got, want := b.srv.Stats(), (h1.Stats{FastRequests: 2, HandedOver: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		shut <- b.srv.Shutdown(ctx)
	}()
	for _, c := range []net.Conn{idle, handed} {
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("an idle connection read %d bytes, want it closed", n)
		}
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(b.release)
	res, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Close {
		t.Error("the last response did not close its connection")
	}
	if err := recv(t, shut, "Shutdown"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := recv(t, b.served, "Serve"); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	b.served <- http.ErrServerClosed // for the cleanup
	if c, err := net.DialTimeout("tcp", b.addr, waitFor); err == nil {
		_ = c.Close()
		t.Fatal("the listener still accepts")
	}
}

// exchangeOn writes raw on c and reads one response.
func exchangeOn(t *testing.T, c net.Conn, raw string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res
}

// FuzzSameAsNetHTTP: whatever a client sends, the responses behind the
// fast path are net/http's.
func FuzzSameAsNetHTTP(f *testing.F) {
	for _, s := range []string{
		post("/mcp", "", `{"a":1}`),
		post("/mcp", "X-Mode: big\r\n", "{}") + post("/mcp", "X-Mode: flush\r\n", "{}"),
		post("/mcp", "Connection: close\r\n", "{}"),
		"POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add(s)
	}
	fast, plain := servers(f, func(s *http.Server) {
		s.ReadHeaderTimeout = 50 * time.Millisecond
		s.ReadTimeout = 50 * time.Millisecond
		s.IdleTimeout = 50 * time.Millisecond
	})
	f.Fuzz(func(t *testing.T, raw string) {
		sameAnswers(t, fast, plain, raw, 4)
	})
}

// Without Paths, net/http serves the listener alone: nothing is handed
// over, nothing served fast, and Shutdown ends Serve with ErrServerClosed.
func TestNoPaths(t *testing.T) {
	s := h1.New(&http.Server{Handler: http.HandlerFunc(handler), ReadHeaderTimeout: waitFor}, h1.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	if res := exchangeOn(t, dial(t, ln.Addr().String()), post("/mcp", "", "{}")); res.Header.Get("X-Writer") != plainWriter {
		t.Errorf("answered by %s, want net/http", res.Header.Get("X-Writer"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := recv(t, served, "Serve"); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	if got := s.Stats(); got != (h1.Stats{}) {
		t.Errorf("Stats = %+v, want none", got)
	}
}

// closeWrite is a script step: the client half-closes its connection.
type closeWrite struct{}

// script plays steps on a new connection (a string is written, a
// duration slept, closeWrite half-closes), then reads responses until the
// server closes the connection, and says what the client saw: each
// response's summary, and the first write or read error. It may run on
// any goroutine: it reports its own failure as an error.
func script(t testing.TB, addr string, steps ...any) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitFor))
	var out []string
	for _, step := range steps {
		switch step := step.(type) {
		case string:
			if _, err := io.WriteString(c, step); err != nil {
				return append(out, "write failed"), nil
			}
		case time.Duration:
			time.Sleep(step)
		case closeWrite:
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}
	br := bufio.NewReader(c)
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("the server did not close the connection in %s", waitFor)
			}
			return append(out, "closed"), nil
		}
		out = append(out, summary(t, res))
	}
}

// sameScript plays steps against both servers at once and wants the
// client to see the same from each.
func sameScript(t *testing.T, fast, plain string, steps ...any) {
	t.Helper()
	type result struct {
		seen []string
		err  error
	}
	fastDone := make(chan result, 1)
	go func() {
		seen, err := script(t, fast, steps...)
		fastDone <- result{seen, err}
	}()
	want, err := script(t, plain, steps...)
	if err != nil {
		t.Fatalf("net/http: %v", err)
	}
	got := <-fastDone
	if got.err != nil {
		t.Fatalf("behind the fast path: %v", got.err)
	}
	if !slices.Equal(got.seen, want) {
		t.Errorf("behind the fast path:\n%s\nfrom net/http:\n%s", strings.Join(got.seen, "\n--\n"), strings.Join(want, "\n--\n"))
	}
}

// Slow and half-closing clients get what net/http gives them, whatever
// the deadlines they meet: ReadHeaderTimeout from the accept for a first
// request, from its first byte for a later one, ReadTimeout for a body,
// IdleTimeout between requests. The sleeps only make the clients slow;
// each is far from the deadline it plays against.
func TestSlowClientsSameAsNetHTTP(t *testing.T) {
	const head10 = "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n"
	const body10 = "0123456789"
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name               string
		header, read, idle time.Duration
		steps              []any
	}{
		{"first body after ReadHeaderTimeout, within ReadTimeout", ms(300), 5 * time.Second, ms(500),
			[]any{head10, ms(900), body10}},
		{"next body after most of IdleTimeout", 5 * time.Second, 5 * time.Second, ms(2000),
			[]any{head10 + body10, ms(1200), head10, ms(1200), body10}},
		{"body past ReadTimeout", 5 * time.Second, ms(300), ms(500),
			[]any{head10, ms(900), body10}},
		{"no ReadHeaderTimeout: ReadTimeout bounds the head", 0, ms(300), ms(500),
			[]any{"POST /mcp HTTP/1.1\r\n"}},
		{"silent, no ReadHeaderTimeout", 0, ms(300), ms(500), nil},
		{"half-closed in the head", 5 * time.Second, 5 * time.Second, ms(500),
			[]any{"POST /mcp HTTP/1.1\r\nHost: a\r\n", closeWrite{}}},
		{"half-closed in the request line", 5 * time.Second, 5 * time.Second, ms(500),
			[]any{"POST /mc", closeWrite{}}},
		{"half-closed after a request", 5 * time.Second, 5 * time.Second, ms(500),
			[]any{head10 + body10, closeWrite{}}},
		{"CR after a body, then silence, no ReadTimeout", ms(200), 0, ms(300),
			[]any{head10, ms(100), body10 + "\r"}},
		{"silent", ms(200), ms(300), ms(300), nil},
		{"head stops", ms(200), ms(300), ms(300), []any{"POST /mcp HTTP/1.1\r\nHost: a\r\n"}},
		{"request line stops", ms(200), ms(300), ms(300), []any{"POST /mc"}},
		{"body stops", ms(200), ms(300), ms(300), []any{head10 + "{}"}},
		{"idle after a response", ms(200), ms(300), ms(300), []any{head10 + body10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fast, plain := servers(t, func(s *http.Server) {
				s.ReadHeaderTimeout, s.ReadTimeout, s.IdleTimeout = tc.header, tc.read, tc.idle
			})
			sameScript(t, fast, plain, tc.steps...)
		})
	}
}

// A client writing a body the handler refuses without reading (or closes
// unread) gets the answer, as from net/http, when it is small enough to drain (the
// connection stays) and when it is not (the connection closes without a
// reset that could lose the answer).
func TestUnreadBodySlowWriter(t *testing.T) {
	fast, plain := servers(t, func(s *http.Server) { s.IdleTimeout = 500 * time.Millisecond })
	for _, mode := range []string{"noread", "closebody"} {
		for _, size := range []int{192 << 10, 320 << 10} {
			t.Run(mode+"/"+strconv.Itoa(size>>10)+"KiB", func(t *testing.T) {
				steps := []any{"POST /mcp HTTP/1.1\r\nHost: a\r\nX-Mode: " + mode + "\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n"}
				for sent := 0; sent < size; sent += 16 << 10 {
					steps = append(steps, strings.Repeat("x", 16<<10), 5*time.Millisecond)
				}
				sameScript(t, fast, plain, steps...)
			})
		}
	}
}

// nilAddrListener's connections have no remote address, as Linux has been
// seen to give for a connection reset at accept.
type nilAddrListener struct{ net.Listener }

type nilAddrConn struct{ net.Conn }

func (nilAddrConn) RemoteAddr() net.Addr { return nil }

func (l nilAddrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return nilAddrConn{c}, nil
}

// A connection without a remote address is served, not a panic.
func TestNilRemoteAddr(t *testing.T) {
	s := h1.New(&http.Server{Handler: http.HandlerFunc(handler), ReadHeaderTimeout: waitFor}, h1.Options{Paths: []string{"/mcp"}})
	addr := serveUntilCleanup(t, s, func(ln net.Listener) net.Listener { return nilAddrListener{ln} })
	if res := exchangeOn(t, dial(t, addr), post("/mcp", "", "{}")); res.StatusCode != http.StatusOK || res.Header.Get("X-Writer") != fastWriter {
		t.Fatalf("%s from %s", res.Status, res.Header.Get("X-Writer"))
	}
}

// WriteTimeout bounds a response's writes, as in net/http: a client that
// does not read makes the handler's write fail instead of blocking it.
func TestWriteTimeout(t *testing.T) {
	failed := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for range 256 {
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	})
	s := h1.New(&http.Server{Handler: h, ReadHeaderTimeout: waitFor, WriteTimeout: 200 * time.Millisecond}, h1.Options{Paths: []string{"/mcp"}})
	addr := serveUntilCleanup(t, s, nil)
	c := dial(t, addr)
	if _, err := io.WriteString(c, post("/mcp", "", "{}")); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, failed, "the handler's writes"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the handler's writes to a client that does not read ended with %v, want a deadline", err)
	}
}

// A server without a handler serves http.DefaultServeMux, as net/http
// does, on the fast path too.
func TestNilHandler(t *testing.T) {
	s := h1.New(&http.Server{ReadHeaderTimeout: waitFor}, h1.Options{Paths: []string{"/mcp"}})
	addr := serveUntilCleanup(t, s, nil)
	if res := exchangeOn(t, dial(t, addr), post("/mcp", "", "{}")); res.StatusCode != http.StatusNotFound {
		t.Fatalf("%s, want DefaultServeMux's 404", res.Status)
	}
	if got := s.Stats(); got.FastRequests != 1 {
		t.Errorf("Stats = %+v, want the request served fast", got)
	}
}

// serveUntilCleanup serves s on a new loopback listener (wrapped by wrap,
// if set) and closes it when the test ends; it returns the address.
func serveUntilCleanup(t *testing.T, s *h1.Server, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve returned %v", err)
		}
	})
	return addr
}
