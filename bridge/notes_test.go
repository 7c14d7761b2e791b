package bridge

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/expertagent"
)

// The tap sees every message line once, in order, however the stream is
// cut into reads; SSE data lines alone, without their prefix.
func TestTapReader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sse    bool
		stream string
		want   []string
	}{
		{"stdio", false, "{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n{\"partial\"", []string{`{"a":1}`, `{"b":2}`, `{"c":3}`}},
		{"sse", true, "event: message\ndata: {\"a\":1}\n\nid: 7\ndata:{\"b\":2}\n\n: comment\n", []string{`{"a":1}`, `{"b":2}`}},
	} {
		for _, chunk := range []int{1, 3, 1 << 10} {
			var got []string
			r := &tapReader{r: io.NopCloser(&chunked{s: tc.stream, n: chunk}), sse: tc.sse, tap: func(b []byte) { got = append(got, string(b)) }}
			out, err := io.ReadAll(r)
			if err != nil || string(out) != tc.stream {
				t.Fatalf("%s/%d: the stream changed: %q, %v", tc.name, chunk, out, err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("%s/%d: tapped %q, want %q", tc.name, chunk, got, tc.want)
			}
		}
	}
	// A line too long to be a notification passes untapped, and the next
	// line is whole.
	var got []string
	long := strings.Repeat("x", maxTapLine+10)
	r := &tapReader{r: io.NopCloser(&chunked{s: long + "\n{\"n\":1}\n", n: 4096}), tap: func(b []byte) { got = append(got, string(b)) }}
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != `{"n":1}` {
		t.Errorf("after a long line, tapped %d lines (%.20q)", len(got), got)
	}
}

// chunked reads s n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := min(len(p), c.n, len(c.s))
	copy(p, c.s[:n])
	c.s = c.s[n:]
	return n, nil
}

// The upstream's stderr is logged a line per entry, long lines in pieces,
// and what is left without a newline when it ends.
func TestLineLogger(t *testing.T) {
	l, hook := test.NewNullLogger()
	w := &lineLogger{log: logrus.NewEntry(l)}
	for _, s := range []string{"first li", "ne\nsecond\r\n\n", strings.Repeat("y", maxStderrLine+1), "\nlast"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	w.flush()
	var got []string
	for _, e := range hook.AllEntries() {
		got = append(got, e.Message)
	}
	want := []string{"first line", "second", strings.Repeat("y", maxStderrLine), "y", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("logged %d lines %.60q, want %d", len(got), got, len(want))
	}
	var nilLogger *lineLogger
	nilLogger.flush() // an HTTP upstream has none
}

func TestWithoutAgentEnv(t *testing.T) {
	got := withoutAgentEnv([]string{"PATH=/bin", "TOOLBUS_AGENT_PASSWORD=secret", "HOME=/root", "TOOLBUS_AGENT_USERNAME=x", "TOOLBUS_OTHER=1"})
	if want := "PATH=/bin HOME=/root TOOLBUS_OTHER=1"; strings.Join(got, " ") != want {
		t.Errorf("env %q, want %q", got, want)
	}
}

func TestDeclares(t *testing.T) {
	caps := []byte(`{"sampling":{},"roots":null,"elicitation":{"form":{}}}`)
	for name, want := range map[string]bool{"sampling": true, "elicitation": true, "roots": false, "tasks": false} {
		if got := declares(caps, name); got != want {
			t.Errorf("declares %s = %v, want %v", name, got, want)
		}
	}
	if declares(nil, "sampling") || declares([]byte(`[1]`), "sampling") {
		t.Error("no capabilities declare something")
	}
}

// An elicitation without a mode is asked of the client without one, not
// with "mode":"" (which clients refuse), and the client's answer is the
// upstream's.
func TestElicitWithoutMode(t *testing.T) {
	b, err := New(Options{URL: "http://127.0.0.1:1/mcp", Agent: expertagent.AgentOptions{Username: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	l := newLifetime(b)
	defer l.close()
	c := &call{id: "c1", asks: make(chan *ask), ended: make(chan struct{}), cancel: func() {},
		req: &expertagent.MethodRequest{}, caps: json.RawMessage(`{"elicitation":{}}`)}
	l.open[c.id] = c
	l.busy = 1 // the bus request of c, served alone
	type result struct {
		res *sdk.ElicitResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := l.elicit(context.Background(), &sdk.ElicitRequest{Params: &sdk.ElicitParams{Message: "name?", RequestedSchema: map[string]any{"type": "object"}}})
		done <- result{res, err}
	}()
	var a *ask
	select {
	case a = <-c.asks:
	case r := <-done:
		t.Fatalf("elicit returned without asking: %+v, %v", r.res, r.err)
	}
	if a.method != "elicitation/create" || strings.Contains(string(a.params), `"mode"`) || !strings.Contains(string(a.params), `"message":"name?"`) {
		t.Errorf("asked %s %s", a.method, a.params)
	}
	a.answer <- answer{result: json.RawMessage(`{"action":"accept","content":{"name":"Ada"}}`)}
	if r := <-done; r.err != nil || r.res.Action != "accept" || r.res.Content["name"] != "Ada" {
		t.Errorf("elicit = %+v, %v", r.res, r.err)
	}
}

// A call is "alone" (the upstream's log messages and questions are its)
// only while nothing else is in flight or held.
func TestAloneOnlyWhenNothingElseIsInFlight(t *testing.T) {
	b, err := New(Options{URL: "http://127.0.0.1:1/mcp", Agent: expertagent.AgentOptions{Username: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	l := newLifetime(b)
	defer l.close()
	c := &call{id: "c1", req: &expertagent.MethodRequest{}, ended: make(chan struct{}), cancel: func() {}}
	l.open[c.id] = c
	for _, tc := range []struct {
		name  string
		busy  int
		held  bool
		alone bool
	}{
		{"the call alone", 1, false, true},
		{"a list in flight beside it", 2, false, false},
		{"another call held", 1, true, false},
	} {
		l.mu.Lock()
		l.busy = tc.busy
		clear(l.held)
		if tc.held {
			l.held["s"] = &call{id: "c2"}
		}
		l.mu.Unlock()
		if got := l.runningAlone() == c; got != tc.alone {
			t.Errorf("%s: alone = %v, want %v", tc.name, got, tc.alone)
		}
	}
	l.mu.Lock()
	clear(l.held) // the stand-in held call has no question to release
	l.mu.Unlock()
}

// What callers read of the upstream never holds its credentials, and what
// the upstream reads of the caller is the gateway's word only.
func TestUpstreamNameAndCallerMeta(t *testing.T) {
	b, err := New(Options{URL: "https://user:secret@mcp.example:8443/s/path-key/mcp?api_key=k#x", Agent: expertagent.AgentOptions{Username: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.upstreamName(); got != "https://mcp.example:8443" {
		t.Errorf("upstreamName = %q", got)
	}
	l := newLifetime(b)
	defer l.close()
	forged := sdk.Meta{CallerMetaKey: map[string]any{"userId": "root"}, "app": "kept"}
	m := l.upstreamMeta(&expertagent.MethodRequest{}, forged, "")
	if _, ok := m[CallerMetaKey]; ok || m["app"] != "kept" {
		t.Errorf("meta %v: a caller-sent %s passed, or the caller's own member was lost", m, CallerMetaKey)
	}
}
