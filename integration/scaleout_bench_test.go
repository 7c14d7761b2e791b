package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// benchSessions is how many MCP sessions the load generator drives at once,
// spread over the replicas round-robin (a session's requests alternate too).
const benchSessions = 32

// BenchmarkScaleOutToolCalls measures agent tool calls (echo, through the
// gateway, the broker and a pool of two workers in one share group) with
// the embedded broker and with 1, 2 and 3 gateway replicas on one external
// Mosquitto sharing one PostgreSQL store. The client is a lean raw HTTP
// JSON-RPC client with pre-encoded requests (the go-sdk client would be the
// bottleneck). Everything runs on this machine, so replicas add no cores:
// the numbers show the cost of the external broker and the shared store,
// not a cluster's capacity. nats-1 and nats-2 run the replicas on a
// three-node NATS cluster (docs/distributed.md), the first replica on the
// first node, the second on the second and the workers on the third. Run:
//
//	go test ./integration/ -run '^$' -bench BenchmarkScaleOutToolCalls -benchtime 4000x
func BenchmarkScaleOutToolCalls(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		g := &gwEnv{}
		srv := startServer(b, server.Config{Logger: benchLogger(b)})
		g.srv, g.base = srv, "http://"+srv.HTTPAddr().String()
		ctx := testCtx(b, 10*time.Second)
		if _, err := srv.Store().AddIdentity(ctx, soWorkerUser, acl.RoleExpertAgent, []byte(soPassword)); err != nil {
			b.Fatal(err)
		}
		so := &scaleOut{brokerAddr: srv.MQTTAddr().String(), direct: true, replicas: []*gwEnv{g}}
		so.worker(b, false)
		so.worker(b, false)
		benchCalls(b, so)
	})
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("external-%d", n), func(b *testing.B) {
			so := startScaleOut(b)
			so.direct = true
			for range n {
				so.replica(b, server.Config{Logger: benchLogger(b)})
			}
			so.worker(b, false)
			so.worker(b, false)
			benchCalls(b, so)
		})
	}
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("nats-%d", n), func(b *testing.B) {
			so := startNATSScaleOut(b)
			for i := range n {
				so.natsReplica(b, i, server.Config{Logger: benchLogger(b)})
			}
			so.workerWith(b, workerSpec{brokerURL: so.nodeURLs(2)})
			so.workerWith(b, workerSpec{brokerURL: so.nodeURLs(2)})
			benchCalls(b, so)
		})
	}
}

// benchCalls runs b.N echo calls over benchSessions raw sessions and
// reports calls/s, the calls' median and 99th percentile latency, and the
// median time to open a session: its initialize, and its first call (which
// sets up the context's reply route).
func benchCalls(b *testing.B, so *scaleOut) {
	b.Helper()
	ctx := testCtx(b, 5*time.Minute)
	secret, _, err := so.replicas[0].srv.Store().CreateToken(ctx, store.TokenSpec{UserID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchSessions, MaxConnsPerHost: benchSessions}}
	type sess struct{ id string }
	sessions := make([]sess, benchSessions)
	var inits, firsts []time.Duration
	for i := range sessions {
		g := so.replicas[i%len(so.replicas)]
		t0 := time.Now()
		body, hdr, err := benchPost(ctx, hc, g.mcpURL(), secret, "",
			`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
		if err != nil || hdr.Get("Mcp-Session-Id") == "" {
			b.Fatalf("initialize: %v %s", err, body)
		}
		inits = append(inits, time.Since(t0))
		sessions[i].id = hdr.Get("Mcp-Session-Id")
	}
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"bench"}}}`
	// Warm every replica's context subscriptions and tool catalogs.
	for i := range sessions {
		for _, g := range so.replicas {
			t0 := time.Now()
			if body, _, err := benchPost(ctx, hc, g.mcpURL(), secret, sessions[i].id, call); err != nil || !strings.Contains(body, `"bench"`) {
				b.Fatalf("warm-up call: %v %s", err, body)
			}
			firsts = append(firsts, time.Since(t0))
		}
	}
	lat := make([][]time.Duration, len(sessions))
	var next, failed atomic.Int64
	var firstErr atomic.Value
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			for n := 0; ; n++ {
				if next.Add(1) > int64(b.N) {
					return
				}
				g := so.replicas[(i+n)%len(so.replicas)] // alternate the session's requests
				t0 := time.Now()
				body, _, err := benchPost(ctx, hc, g.mcpURL(), secret, sessions[i].id, call)
				lat[i] = append(lat[i], time.Since(t0))
				if err != nil || !strings.Contains(body, `"text":"bench"`) || strings.Contains(body, `"isError":true`) {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%v %s", err, body))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls failed; first: %v", n, b.N, firstErr.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
	all := slices.Concat(lat...)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(quantile(all, 0.50)), "p50-ms")
	b.ReportMetric(ms(quantile(all, 0.99)), "p99-ms")
	b.ReportMetric(ms(quantile(inits, 0.50)), "init-ms")
	b.ReportMetric(ms(quantile(firsts, 0.50)), "first-call-ms")
}

// quantile is the q-quantile of ds (sorted in place); 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// benchPost sends one JSON-RPC POST and returns the body (an SSE answer's
// data lines included as they are) and the response headers.
func benchPost(ctx context.Context, hc *http.Client, url, token, session, body string) (string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		return "", nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return buf.String(), resp.Header, fmt.Errorf("status %d", resp.StatusCode)
	}
	return buf.String(), resp.Header, nil
}

// benchLogger keeps the gateways' logs to errors: a benchmark logs little.
func benchLogger(b *testing.B) *logrus.Entry { return testenv.LoggerAt(b, "", logrus.ErrorLevel) }
