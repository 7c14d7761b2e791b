package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinyLoad is the configuration that keeps the harness from rotting: a few
// sessions, a few hundred calls, no warm-up. Nothing here asserts on timing.
func tinyLoad(url string) LoadOptions {
	return LoadOptions{URL: url, Sessions: 4, Concurrency: 4, Calls: 200, CallTimeout: 10 * time.Second}
}

func startBaseline(t testing.TB, name string) Server {
	t.Helper()
	srv, err := NewBaseline(name, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
	})
	return srv
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkWellFormed asserts what any successful result must satisfy.
func checkWellFormed(t *testing.T, r *Result, calls int64) {
	t.Helper()
	if r.Errors != 0 {
		t.Fatalf("errors = %d (%v), samples: %q", r.Errors, r.ErrorKinds, r.ErrorSamples)
	}
	if r.Calls != calls || r.OK != calls {
		t.Errorf("calls = %d, ok = %d, want %d", r.Calls, r.OK, calls)
	}
	l := r.Latency
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max && l.Mean > 0 && l.Mean <= l.Max) {
		t.Errorf("latency summary not ordered: %+v", l)
	}
	if r.Throughput <= 0 || r.ElapsedSeconds <= 0 {
		t.Errorf("throughput %v over %v s", r.Throughput, r.ElapsedSeconds)
	}
	if r.Generator == nil || r.Generator.CPUSeconds < 0 {
		t.Errorf("generator stats = %+v", r.Generator)
	}
	if runtime.GOOS == "linux" && r.Generator != nil && r.Generator.PeakRSSBytes <= 0 {
		t.Errorf("generator peak RSS = %d", r.Generator.PeakRSSBytes)
	}
}

func TestHarnessTiny(t *testing.T) {
	cases := []struct {
		baseline, version string
	}{
		{BaselineBare, ProtocolLegacy},
		{BaselineBare, ProtocolModern},
		{BaselineMCPGo, ProtocolLegacy},
		{BaselineMCPGo, ProtocolModern},
		{BaselineMCPGo, "2025-06-18"},
		{BaselineGoSDK, ProtocolLegacy},
		{BaselineGoSDKStateless, ProtocolModern},
		{BaselineGoSDKStateless, ProtocolLegacy},
	}
	for _, tc := range cases {
		t.Run(tc.baseline+"@"+tc.version, func(t *testing.T) {
			srv := startBaseline(t, tc.baseline)
			for _, client := range []string{ClientRaw, ClientNetHTTP} {
				lo := tinyLoad(srv.URL())
				lo.ProtocolVersion = tc.version
				lo.Client = client
				r, err := Run(testContext(t), lo)
				if err != nil {
					t.Fatalf("%s client: %v", client, err)
				}
				checkWellFormed(t, r, 200)
				if r.ProtocolVersion != tc.version || r.Client != client {
					t.Errorf("protocol version %q, client %q; want %q, %q", r.ProtocolVersion, r.Client, tc.version, client)
				}
				if r.FullChecks < 1 || r.FullChecks > 200 {
					t.Errorf("%s client: %d responses decoded in full", client, r.FullChecks)
				}
			}
		})
	}
}

func TestHarnessDurationAndPayload(t *testing.T) {
	srv := startBaseline(t, BaselineGoSDK) // SSE responses, chunked
	for _, client := range []string{ClientRaw, ClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			lo := tinyLoad(srv.URL())
			lo.Client = client
			lo.Calls = 0
			lo.Duration = 200 * time.Millisecond
			lo.Warmup = 50 * time.Millisecond
			lo.PayloadBytes = 64 << 10
			lo.Concurrency = 8 // two workers per session
			r, err := Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			if r.Calls == 0 {
				t.Fatal("no call in 200ms")
			}
			checkWellFormed(t, r, r.Calls)
			if r.PayloadBytes != 64<<10 || r.Concurrency != 8 || r.Sessions != 4 {
				t.Errorf("config not reported: %+v", r)
			}
		})
	}
}

func TestHarnessCountsErrors(t *testing.T) {
	srv := startBaseline(t, BaselineBare)
	cases := []struct {
		name string
		edit func(*LoadOptions)
		kind string
	}{
		{"unknown tool", func(o *LoadOptions) { o.Tool = "no_such_tool" }, "jsonrpc_error"},
		{"tool error", func(o *LoadOptions) { o.Arguments = json.RawMessage(`{}`) }, "tool_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lo := tinyLoad(srv.URL())
			lo.Calls = 50
			tc.edit(&lo)
			r, err := Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors != 50 || r.OK != 0 || r.ErrorKinds[tc.kind] != 50 {
				t.Errorf("errors = %d, ok = %d, kinds = %v; want 50 %s", r.Errors, r.OK, r.ErrorKinds, tc.kind)
			}
			if len(r.ErrorSamples) == 0 {
				t.Error("no error sample")
			}
		})
	}
}

func TestRunSetupFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(testContext(t), LoadOptions{URL: "http://" + addr + "/mcp", Sessions: 1, Calls: 1, CallTimeout: 2 * time.Second})
	if !errors.Is(err, ErrSetup) {
		t.Fatalf("err = %v, want ErrSetup", err)
	}
	if _, err := Run(testContext(t), LoadOptions{URL: "not a url"}); err == nil {
		t.Error("bad URL accepted")
	}
}

func TestSuiteChildProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process stats come from /proc")
	}
	dir := t.TempDir()
	scenarios, err := ParseScenarios("bare,mcp-go,go-sdk-stateless@2026-07-28")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	rep, err := RunSuite(testContext(t), SuiteOptions{
		Scenarios: scenarios,
		Load:      LoadOptions{Sessions: 4, Calls: 200},
		Child:     ChildOptions{Command: []string{os.Args[0]}, Env: []string{childEnv + "=1"}, Stderr: &stderr},
		Baseline:  BaselineBare,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() || len(rep.Results) != 3 {
		t.Fatalf("report failed or incomplete: %+v; child stderr: %s", rep.Results, stderr.String())
	}
	for _, r := range rep.Results {
		checkWellFormed(t, r, 200)
		if r.Mode != "child-process" || r.Server == nil || r.Server.PID == 0 || r.Server.PeakRSSBytes <= 0 || len(r.Processes) != 1 {
			t.Errorf("%s: mode %q, server stats %+v", r.Scenario, r.Mode, r.Server)
		}
		if r.Scenario == BaselineBare {
			if r.Ratios != nil {
				t.Errorf("baseline has ratios against itself: %+v", r.Ratios)
			}
		} else if r.Ratios == nil || r.Ratios.Baseline != BaselineBare || r.Ratios.Throughput <= 0 {
			t.Errorf("%s: ratios = %+v", r.Scenario, r.Ratios)
		}
	}
	if got := rep.Results[2].ProtocolVersion; got != ProtocolModern {
		t.Errorf("@version ignored: %s", got)
	}

	p, err := rep.WriteJSON(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != dir {
		t.Errorf("report written to %s", p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	if len(back.Results) != 3 || back.Results[1].Scenario != BaselineMCPGo || back.Results[1].Latency.P99 <= 0 || back.Machine.NumCPU == 0 {
		t.Errorf("report round trip lost data: %s", data)
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scenario", "bare", "mcp-go", "go-sdk-stateless", "child-process"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

func TestSuiteReportsSetupFailure(t *testing.T) {
	rep, err := RunSuite(testContext(t), SuiteOptions{
		Scenarios: []Scenario{{URL: "http://127.0.0.1:1/mcp"}, {Baseline: BaselineBare}},
		Load:      LoadOptions{Sessions: 1, Calls: 10, CallTimeout: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].SetupError == "" || rep.Results[1].SetupError != "" || !rep.Failed() {
		t.Fatalf("results = %+v", rep.Results)
	}
	if rep.Results[0].Scenario != "target:echo" {
		t.Errorf("scenario name = %q", rep.Results[0].Scenario)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "did not run") {
		t.Errorf("table hides the setup failure:\n%s", table.String())
	}
}

func TestParseScenarios(t *testing.T) {
	cases := []struct {
		in      string
		want    []string // name@version
		wantErr bool
	}{
		{"baselines", []string{"bare@", "mcp-go@", "go-sdk@", "go-sdk-stateless@"}, false},
		{"bare@2026-07-28, target", []string{"bare@2026-07-28", "target:echo@"}, false},
		{"baselines@2025-06-18", []string{"bare@2025-06-18", "mcp-go@2025-06-18", "go-sdk@2025-06-18", "go-sdk-stateless@2025-06-18"}, false},
		{"nope", nil, true},
		{"", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseScenarios(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error for %q", tc.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.name()+"@"+s.ProtocolVersion)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %v, want %v", names, tc.want)
			}
		})
	}
}

// BenchmarkBaselines measures each baseline in this process (server and
// generator share the CPU; cmd/toolbus-bench separates them).
func BenchmarkBaselines(b *testing.B) {
	for _, name := range BaselineNames() {
		b.Run(name, func(b *testing.B) {
			srv, err := NewBaseline(name, ServerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			r, err := Run(context.Background(), LoadOptions{
				URL: srv.URL(), Calls: b.N, ProtocolVersion: DefaultProtocolVersion(name),
			})
			if err != nil {
				b.Fatal(err)
			}
			if r.Errors > 0 {
				b.Fatalf("%d errors: %q", r.Errors, r.ErrorSamples)
			}
			b.ReportMetric(r.Throughput, "calls/s")
			b.ReportMetric(r.Latency.P50, "p50-ms")
			b.ReportMetric(r.Latency.P99, "p99-ms")
		})
	}
}

// near reports whether two ratios agree to rounding (they are computed
// from the same throughputs in another order).
func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestSuiteRoundsSummary(t *testing.T) {
	rep, err := RunSuite(testContext(t), SuiteOptions{
		Scenarios: []Scenario{{Baseline: BaselineBare}, {Baseline: BaselineMCPGo}},
		Load:      LoadOptions{Sessions: 2, Calls: 50},
		Rounds:    3,
		Baseline:  BaselineBare,
		Compare:   []Pair{{Scenario: BaselineBare, Against: BaselineMCPGo}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 6 || len(rep.Summary) != 2 || rep.Rounds != 3 || rep.Failed() {
		t.Fatalf("results %d, summary %d, rounds %d", len(rep.Results), len(rep.Summary), rep.Rounds)
	}
	for i, r := range rep.Results {
		if want := i/2 + 1; r.Round != want {
			t.Errorf("result %d (%s) round %d, want %d: rounds must interleave", i, r.Scenario, r.Round, want)
		}
	}
	if s := rep.Summary[0]; s.Scenario != BaselineBare || s.Ratios != nil {
		t.Errorf("summary[0] = %s with ratios %+v", s.Scenario, s.Ratios)
	}
	if s := rep.Summary[1]; s.Scenario != BaselineMCPGo || s.Ratios == nil || s.Ratios.Baseline != BaselineBare {
		t.Errorf("summary[1] = %s with ratios %+v", s.Scenario, s.Ratios)
	}
	// The summary entry is the median round by throughput.
	var tp []float64
	for _, r := range rep.Results {
		if r.Scenario == BaselineMCPGo {
			tp = append(tp, r.Throughput)
		}
	}
	slices.Sort(tp)
	if rep.Summary[1].Throughput != tp[1] {
		t.Errorf("summary throughput %v, rounds %v", rep.Summary[1].Throughput, tp)
	}
	// Each round's ratio is against the baseline of that round.
	var ratios []float64
	for _, r := range rep.Results {
		if r.Scenario != BaselineMCPGo {
			continue
		}
		for _, b := range rep.Results {
			if b.Scenario == BaselineBare && b.Round == r.Round {
				ratios = append(ratios, r.Throughput/b.Throughput)
			}
		}
	}
	slices.Sort(ratios)
	got := rep.Summary[1].RoundRatios
	if got == nil || got.N != 3 || !near(got.Median, ratios[1]) || !near(got.Min, ratios[0]) || !near(got.Max, ratios[2]) {
		t.Errorf("round ratios %+v, want median %.3f of %v", got, ratios[1], ratios)
	}
	if rep.Summary[0].RoundRatios != nil {
		t.Errorf("the baseline has round ratios %+v", rep.Summary[0].RoundRatios)
	}
	// The comparison bare vs mcp-go is the inverse of mcp-go's ratios
	// against bare, round by round.
	if len(rep.Comparisons) != 1 || rep.Comparisons[0].Throughput == nil {
		t.Fatalf("comparisons %+v", rep.Comparisons)
	}
	inv := make([]float64, len(ratios))
	for i, r := range ratios {
		inv[i] = 1 / r
	}
	slices.Sort(inv)
	if c := rep.Comparisons[0].Throughput; c.N != 3 || !near(c.Median, inv[1]) || !near(c.Min, inv[0]) || !near(c.Max, inv[2]) {
		t.Errorf("comparison %+v, want median %.3f of %v", c, inv[1], inv)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"median-throughput round of 3", "x per round", fmt.Sprintf("%.2f [%.2f-%.2f]", got.Median, got.Min, got.Max),
		fmt.Sprintf("bare vs mcp-go: calls/s x%.2f per round, median of 3 [%.2f-%.2f]", inv[1], inv[0], inv[2])} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}

	for _, sc := range [][]Scenario{
		{{Baseline: BaselineBare}},
		{{Baseline: BaselineBare}, {Baseline: BaselineMCPGo}, {Baseline: BaselineMCPGo, ProtocolVersion: ProtocolModern}}, // two named mcp-go
	} {
		_, err = RunSuite(testContext(t), SuiteOptions{Scenarios: sc, Compare: []Pair{{Scenario: BaselineBare, Against: BaselineMCPGo}}})
		if !errors.Is(err, ErrUnknownScenario) {
			t.Errorf("compare with %d scenarios: %v, want ErrUnknownScenario", len(sc), err)
		}
	}
}

func TestParsePair(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Pair
		ok   bool
	}{
		{"target:echo vs go-sdk", Pair{"target:echo", "go-sdk"}, true},
		{" tools/list 10 cached  vs tools/list 10 uncached ", Pair{"tools/list 10 cached", "tools/list 10 uncached"}, true},
		{"a/b", Pair{}, false},
		{"a vs ", Pair{}, false},
		{"a vs a", Pair{}, false},
	} {
		got, err := ParsePair(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePair(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

// TestReportCompare: a comparison pairs the two scenarios round by round,
// skips rounds where either failed to start or made no call, compares p99
// only between paced runs, and says so when no round measured both.
func TestReportCompare(t *testing.T) {
	res := func(sc string, round int, tp, p99, rate float64, setupErr string) *Result {
		return &Result{Scenario: sc, Round: round, Throughput: tp, Rate: rate, SetupError: setupErr, Latency: LatencySummary{P99: p99}}
	}
	rep := &Report{Results: []*Result{
		res("a", 1, 200, 2, 0, ""), res("b", 1, 100, 4, 0, ""),
		res("a", 2, 300, 2, 0, ""), res("b", 2, 100, 4, 0, ""),
		res("a", 3, 500, 2, 0, ""), res("b", 3, 0, 0, 0, "no server"), // skipped
		res("a", 4, 0, 0, 0, ""), res("b", 4, 100, 4, 0, ""), // no call: skipped
		res("p", 1, 100, 1, 50, ""), res("q", 1, 100, 4, 50, ""),
	}}
	rep.compare([]Pair{{"a", "b"}, {"p", "q"}, {"a", "p"}, {"a", "zzz"}})
	if len(rep.Comparisons) != 4 {
		t.Fatalf("comparisons %+v", rep.Comparisons)
	}
	if c := rep.Comparisons[0]; c.Throughput == nil || c.Throughput.N != 2 || c.Throughput.Min != 2 || c.Throughput.Max != 3 || c.P99 != nil {
		t.Errorf("a vs b: %+v %+v (saturated: no p99)", c.Throughput, c.P99)
	}
	if c := rep.Comparisons[1]; c.P99 == nil || c.P99.Median != 0.25 {
		t.Errorf("p vs q (paced): p99 %+v, want 0.25", c.P99)
	}
	if c := rep.Comparisons[2]; c.Throughput == nil || c.Throughput.N != 1 || c.P99 != nil {
		t.Errorf("a vs p (one paced): %+v %+v", c.Throughput, c.P99)
	}
	var table bytes.Buffer
	for _, c := range rep.Comparisons {
		if err := writeComparison(&table, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a vs b: calls/s x2.00 per round, median of 2 [2.00-3.00]\n", "p vs q: calls/s x1.00 per round, median of 1 [1.00-1.00]; p99 x0.25", "a vs zzz: no round measured both"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("lines lack %q:\n%s", want, table.String())
		}
	}
}
