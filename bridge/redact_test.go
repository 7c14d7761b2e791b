package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	sdkrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
)

// The secrets of the URLs these tests use.
var urlSecrets = []string{"s3cret-pw", "p4th-k3y", "k3y-value", "t0ken%2Fx", "t0ken/x", "bob:"}

func checkRedacted(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range urlSecrets {
		if strings.Contains(s, secret) {
			t.Errorf("%s holds %q: %s", what, secret, s)
		}
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestRedactor(t *testing.T) {
	raw := "http://bob:s3cret-pw@example.test:9000/s/p4th-k3y/mcp?api_key=k3y-value&token=t0ken%2Fx&page=1"
	r := newRedactor(raw, "http://example.test:9000")
	u, _ := url.Parse(raw)
	tests := []struct {
		name, in, want string
	}{
		{"url.Error", (&url.Error{Op: "Post", URL: u.Redacted(), Err: errors.New("connection refused")}).Error(),
			`Post "http://example.test:9000": connection refused`},
		{"net/http's url.Error", `Post "http://bob:***@example.test:9000/s/p4th-k3y/mcp?api_key=k3y-value&token=t0ken%2Fx&page=1": EOF`,
			`Post "http://example.test:9000": EOF`},
		{"the raw URL, quoted", fmt.Sprintf("connecting to %q failed", raw), `connecting to "http://example.test:9000" failed`},
		{"the path alone", "no session at /s/p4th-k3y/mcp", "no session at REDACTED"},
		{"a query value alone", "server said: bad key k3y-value", "server said: bad key REDACTED"},
		{"a decoded query value", "token t0ken/x refused", "token REDACTED refused"},
		{"the password alone", "pw s3cret-pw", "pw REDACTED"},
		{"nothing to redact", "page 1 of 2", "page 1 of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.text(tt.in); got != tt.want {
				t.Errorf("text(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	base := errors.New("base")
	if err := r.err(fmt.Errorf("%s: %w", raw, base)); !errors.Is(err, base) || strings.Contains(err.Error(), "k3y") {
		t.Errorf("err() = %v: want it redacted and unwrapping to its cause", err)
	}
	if got := (redactor{}).text(raw); got != raw {
		t.Errorf("a stdio bridge's redactor changed %q", got)
	}
}

// An upstream error's data passes with the URL's secrets taken out of its
// strings however the upstream escaped them, and byte for byte without.
func TestRedactorJSON(t *testing.T) {
	raw := "http://bob:s3cret-pw@example.test:9000/s/p4th-k3y/mcp?api_key=k3y-value&token=t0ken%2Fx"
	r := newRedactor(raw, "http://example.test:9000")
	tests := []struct {
		name, in, want string
	}{
		{"the URL", `{"url":"` + raw + `"}`, `{"url":"http://example.test:9000"}`},
		{"escaped", `["http:\/\/example.test:9000\/s\/p4th-k3y\/mcp?api_key=k3y-value\u0026token=t0ken%2Fx"]`,
			`["http://example.test:9000"]`},
		{"a member name", `{"k3y-value":1.50}`, `{"REDACTED":1.50}`},
		{"nested", `{"a":[{"b":"no /s/p4th-k3y/mcp"}],"n":1e3}`, `{"a":[{"b":"no REDACTED"}],"n":1e3}`},
		{"nothing to redact", `{ "b": 1, "a": "x" }`, `{ "b": 1, "a": "x" }`},
		{"not JSON", `{"url":"` + raw, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(r.json(json.RawMessage(tt.in))); got != tt.want {
				t.Errorf("json(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// An HTTP upstream that cannot be reached: neither the error nor the logs
// nor what a caller reads name its URL's credentials.
func TestUpstreamURLRedacted(t *testing.T) {
	raw := "http://bob:s3cret-pw@" + closedPort(t) + "/s/p4th-k3y/mcp?api_key=k3y-value&token=t0ken%2Fx"
	logger, hook := test.NewNullLogger()
	failed := make(chan struct{}, 1)
	logger.AddHook(hookFunc(func(e *logrus.Entry) {
		if e.Message == "upstream not serving; starting it again" {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}))
	b, err := New(Options{URL: raw, Agent: expertagent.AgentOptions{Username: "wiki", BrokerURL: "tcp://" + closedPort(t)},
		InitTimeout: 5 * time.Second, Logger: logrus.NewEntry(logger)})
	if err != nil {
		t.Fatal(err)
	}

	l := newLifetime(b)
	err = l.connect(t.Context())
	l.wait()
	if err == nil {
		t.Fatal("connect to a closed port succeeded")
	}
	checkRedacted(t, "connect's error", err.Error())
	if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("connect's error %q does not say which upstream", err)
	}
	checkRedacted(t, "the caller's error", l.upstreamErr(&url.Error{Op: "Post", URL: raw, Err: errors.New("EOF")}).Error())
	quoted, _ := json.Marshal(map[string]string{"endpoint": raw})
	var rpcErr *jsonrpc.Error
	if !errors.As(l.upstreamErr(&sdkrpc.Error{Code: -32000, Message: "no session at " + raw, Data: quoted}), &rpcErr) {
		t.Fatal("the upstream's JSON-RPC error did not pass as one")
	}
	checkRedacted(t, "the upstream's error message", rpcErr.Message)
	checkRedacted(t, "the upstream's error data", string(rpcErr.Data))

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("no failed start logged")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range hook.AllEntries() {
		s, _ := e.String()
		checkRedacted(t, "log entry", s)
	}
}

// hookFunc is a logrus hook that calls itself for every entry.
type hookFunc func(*logrus.Entry)

func (hookFunc) Levels() []logrus.Level       { return logrus.AllLevels }
func (f hookFunc) Fire(e *logrus.Entry) error { f(e); return nil }
