package bench

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/platformtools"
)

// BenchmarkHandler drives one tools/call at a time through each server's
// http.Handler in this process, with no socket and no HTTP parsing: what a
// call costs the server's own code, in CPU and allocations. The sessions
// are opened over real HTTP first; the load generator and the TCP stack,
// which dominate and blur cmd/toolbus-bench's numbers, are left out. Their
// ns/op are comparable with each other in one run; allocs/op are exact.
// The sub-benchmarks:
//   - bare, mcp-go, go-sdk (stateful): the baselines' echo tool;
//   - gateway-platform: platform_echo, a tool inside the gateway;
//   - gateway-agent: echo on the expert agent, through the embedded broker
//     (the MQTT round trip included, so ns/op is latency, not CPU).
//
// Run it with
//
//	go test -run '^$' -bench BenchmarkHandler -benchmem ./bench/
func BenchmarkHandler(b *testing.B) {
	g := startBenchGateway(b)
	for _, tc := range []struct {
		name  string
		tool  string
		start func(b *testing.B) (http.Handler, string, string) // handler, URL, token
	}{
		{"bare", EchoTool, func(b *testing.B) (http.Handler, string, string) {
			s := startBaseline(b, BaselineBare)
			return s.(*BareServer), s.URL(), ""
		}},
		{"mcp-go", EchoTool, func(b *testing.B) (http.Handler, string, string) {
			s := startBaseline(b, BaselineMCPGo)
			return s.(*MCPGoServer).handler, s.URL(), ""
		}},
		{"go-sdk", EchoTool, func(b *testing.B) (http.Handler, string, string) {
			s := startBaseline(b, BaselineGoSDK)
			return s.(*GoSDKServer).handler, s.URL(), ""
		}},
		{"gateway-platform", platformtools.ToolEcho, func(*testing.B) (http.Handler, string, string) {
			return g.srv.Handler(), g.url, g.token
		}},
		{"gateway-agent", EchoTool, func(*testing.B) (http.Handler, string, string) {
			return g.srv.Handler(), g.url, g.token
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, u, token := tc.start(b)
			s, body := handlerSession(b, u, token, tc.tool)
			ctx := context.Background()
			w := &discardWriter{header: http.Header{}}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				clear(w.header)
				w.status = 0
				h.ServeHTTP(w, s.request(ctx, body))
				if w.status != http.StatusOK || !bytes.Contains(w.body, []byte(`"hello"`)) || bytes.Contains(w.body, []byte(`"isError":true`)) {
					b.Fatalf("status %d, body %.300s", w.status, w.body)
				}
				w.body = w.body[:0]
			}
			// ns/op is the caller's wall time; the process's CPU also
			// counts what runs beside it (GC workers, the audit writer,
			// the broker and the agent for gateway-agent).
			b.ReportMetric(float64(processCPU(b)-cpu0)/1e3/float64(b.N), "cpu-us/op")
		})
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// handlerSession opens one legacy-era session on u over HTTP and returns it
// with the body of a tools/call of tool.
func handlerSession(b *testing.B, u, token, tool string) (*session, []byte) {
	b.Helper()
	opts := LoadOptions{URL: u, Token: token, Sessions: 1, Tool: tool, ProtocolVersion: ProtocolLegacy}.withDefaults()
	parsed, err := url.Parse(u)
	if err != nil {
		b.Fatal(err)
	}
	client, tr := newHTTPClient(1, opts.CallTimeout)
	b.Cleanup(tr.CloseIdleConnections)
	c := &caller{opts: opts, url: parsed, client: client, run: randomHex(4)}
	s, err := c.openSession(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.closeSessions([]*session{s}) })
	call := encodeCall(opts, []byte(`{"text":"hello"}`))
	body := append(append(append([]byte{}, call.prefix...), strconv.Itoa(1)...), call.suffix...)
	return s, body
}

// discardWriter is the cheapest http.ResponseWriter that still keeps what a
// check needs: the status and the body.
type discardWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *discardWriter) Flush() {}
