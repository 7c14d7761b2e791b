package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bench"
)

func TestScenarioListModes(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    []string // name cold contexts url pids floor
		wantErr bool
	}{
		{"cold variants and label", []string{"--scenario", "target", "--target", "http://h/m", "--tool", "echo", "--label", "agent echo", "--cold"},
			[]string{"agent echo false 0 http://h/m [] false", "agent echo cold true 0 http://h/m [] false"}, false},
		{"cold without label", []string{"--scenario", "target", "--target", "http://h/m", "--cold", "--contexts", "7"},
			[]string{" false 7 http://h/m [] false", "target:echo cold true 7 http://h/m [] false"}, false},
		{"extra target", []string{"--scenario", "target", "--target", "http://h/m", "--target-pid", "3", "--label", "cached",
			"--extra-target", "uncached=http://u:1/m=4,5", "--method", "tools/list"},
			[]string{"cached false 0 http://h/m [3] false", "uncached false 0 http://u:1/m [4 5] false"}, false},
		{"tools/list names", []string{"--scenario", "target", "--target", "http://h/m", "--method", "tools/list"},
			[]string{"target:tools/list false 0 http://h/m [] false"}, false},
		{"mqtt floor with its pids", []string{"--scenario", "bare", "--mqtt-floor", "tcp://b:1", "--mqtt-username", "u", "--mqtt-floor-pid", "9", "--target-pid", "8"},
			[]string{"bare false 0  [] false", " false 0  [9] true"}, false},
		{"mqtt floor defaults to target pids", []string{"--scenario", "target", "--target", "http://h/m", "--target-pid", "8", "--mqtt-floor", "tcp://b:1"},
			[]string{" false 0 http://h/m [8] false", " false 0  [8] true"}, false},
		{"bad extra target", []string{"--target", "http://h/", "--extra-target", "nourl"}, nil, true},
		{"bad extra target pid", []string{"--target", "http://h/", "--extra-target", "x=http://e/=y"}, nil, true},
		{"bad floor pid", []string{"--mqtt-floor", "tcp://b:1", "--mqtt-floor-pid", "x"}, nil, true},
		{"bad floor client", []string{"--mqtt-floor", "tcp://b:1", "--mqtt-floor-client", "mosquitto_pub"}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, func(string) string { return "" }, &bytes.Buffer{})
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
				names = append(names, fmt.Sprintf("%s%s %t %d %s %s %t", s.Baseline, s.Name, s.Cold, s.Contexts, s.URL, pidStr(s.PIDs), s.MQTTFloor != nil))
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got  %q\nwant %q", names, tc.want)
			}
		})
	}
}

func pidStr(p []int) string { return fmt.Sprint(p) }

// TestMerge runs two tiny suites into phase directories, then merges them
// the way scripts/bench.sh does at its end.
func TestMerge(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, phase := range []string{"01-first", "02-second"} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{"--inprocess", "--scenario", "bare,mcp-go", "--sessions", "2", "--calls", "50", "--warmup", "0",
			"--pause", "0", "--out", filepath.Join(dir, "run", phase), "--title", "phase " + phase, "--note", "tiny", "--log-level", "warn"},
			func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", phase, code, stdout.String(), stderr.String())
		}
		if !strings.Contains(stdout.String(), "chart: ") {
			t.Errorf("no chart written:\n%s", stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--merge", filepath.Join(dir, "run"), "--out", dir, "--command", "make bench"},
		func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("merge: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if strings.Index(out, "== phase 01-first") > strings.Index(out, "== phase 02-second") || !strings.Contains(out, "note: tiny") {
		t.Errorf("merged table:\n%s", out)
	}
	for _, glob := range []string{"bench-all-*.json", "bench-all-*.svg"} {
		if m, _ := filepath.Glob(filepath.Join(dir, glob)); len(m) != 1 {
			t.Errorf("%s: %v", glob, m)
		}
	}
	if code := run(ctx, []string{"--merge", t.TempDir()}, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr); code != 1 {
		t.Errorf("merge of an empty directory: exit %d", code)
	}
}
