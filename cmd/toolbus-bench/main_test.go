package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bench"
)

func TestRunInProcessTiny(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{
		"--inprocess", "--scenario", "bare,mcp-go@2026-07-28", "--sessions", "2", "--calls", "100",
		"--warmup", "0", "--pause", "0", "--baseline", "bare", "--out", dir, "--log-level", "warn",
		"--compare", "mcp-go vs bare",
	}, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"bare", "mcp-go", "2026-07-28", "in-process", "report: ", "mcp-go vs bare: calls/s x"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "bench-*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("report files = %v, %v", files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].OK != 100 || rep.Results[1].OK != 100 || rep.Baseline != "bare" {
		t.Errorf("report: %s", data)
	}
	if len(rep.Comparisons) != 1 || rep.Comparisons[0].Scenario != "mcp-go" || rep.Comparisons[0].Throughput == nil {
		t.Errorf("comparisons: %+v", rep.Comparisons)
	}

	for _, bad := range []string{"mcp-go/bare", "mcp-go vs nope"} {
		stdout.Reset()
		stderr.Reset()
		code := run(ctx, []string{"--inprocess", "--scenario", "bare,mcp-go", "--calls", "10", "--out", "", "--compare", bad},
			func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), "compare") {
			t.Errorf("--compare %q: exit %d, stderr %q", bad, code, stderr.String())
		}
	}
}

func TestScenarioList(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		want    []string // name@version url
		wantErr bool
	}{
		{"default", nil, nil, []string{"bare@ ", "mcp-go@ ", "go-sdk@ ", "go-sdk-stateless@ "}, false},
		{"target adds itself, one per tool", []string{"--target", "http://h/api/v1/mcp", "--tool", "echo,platform_whoami", "--protocol-version", "2025-06-18"}, nil,
			[]string{"bare@2025-06-18 ", "mcp-go@2025-06-18 ", "go-sdk@2025-06-18 ", "go-sdk-stateless@2025-06-18 ",
				"target:echo@2025-06-18 http://h/api/v1/mcp", "target:platform_whoami@2025-06-18 http://h/api/v1/mcp"}, false},
		{"per-tool args", []string{"--target", "http://h/", "--tool", "echo,platform_whoami", "--tool-args", "platform_whoami={}", "--scenario", "target"}, nil,
			[]string{"target:echo@ http://h/ <nil>", "target:platform_whoami@ http://h/ {}"}, false},
		{"bad tool args", []string{"--target", "http://h/", "--tool-args", "x"}, nil, nil, true},
		{"explicit scenario list", []string{"--scenario", "target@2026-07-28"}, map[string]string{"TOOLBUS_BENCH_TARGET": "http://e/mcp"},
			[]string{"target:echo@2026-07-28 http://e/mcp"}, false},
		{"target without URL", []string{"--scenario", "target"}, nil, nil, true},
		{"bad args", []string{"--target", "http://h/", "--args", "{"}, nil, nil, true},
		{"bad pid", []string{"--target", "http://h/", "--target-pid", "12,x"}, nil, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, &bytes.Buffer{})
			var got []bench.Scenario
			if err == nil {
				got, err = c.scenarioList()
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				n := s.Baseline
				if n == "" {
					n = "target:" + s.Tool
				}
				name := n + "@" + s.ProtocolVersion + " " + s.URL
				if strings.Contains(tc.name, "args") {
					name += " " + string(s.Arguments)
					if s.Arguments == nil {
						name += "<nil>"
					}
				}
				names = append(names, name)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %q\nwant %q", names, tc.want)
			}
		})
	}
}

// TestRunTarget drives an endpoint the command did not start, the way it
// measures the toolbus gateway: a baseline stands in for it, and this
// process's PID for its processes.
func TestRunTarget(t *testing.T) {
	srv := bench.NewBareServer(bench.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	pid := strconv.Itoa(os.Getpid())
	code := run(ctx, []string{
		"--scenario", "target", "--target", srv.URL(), "--tool", "echo", "--target-pid", pid + "," + pid,
		"--token", "secret", "--sessions", "2", "--calls", "50", "--warmup", "0", "--out", dir, "--log-level", "warn",
	}, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "bench-*.json"))
	if len(files) != 1 {
		t.Fatalf("report files: %v", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Summary[0]
	if r.Scenario != "target:echo" || r.Mode != "external" || r.OK != 50 {
		t.Errorf("result: %+v", r)
	}
	if runtime.GOOS == "linux" && (len(r.Processes) != 2 || r.Server == nil) {
		t.Errorf("server processes: %+v, server %+v", r.Processes, r.Server)
	}
}
