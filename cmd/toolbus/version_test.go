package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
)

// versionRE is what buildinfo.Version writes: a module version (a tag or
// a pseudo-version, +dirty for a modified checkout) or "(devel)" with the
// VCS revision and time when the build has them.
var versionRE = regexp.MustCompile(`^(v\d+\.\d+\.\d+\S*|\(devel\)( [0-9a-f]+(\+dirty)?( \S+)?)?)$`)

// buildTool builds package pkg (relative to this directory) into a
// temporary directory: a test binary has no build stamp, a built one has.
// -buildvcs=auto stamps the revision whatever GOFLAGS says, where git can
// read the checkout.
func buildTool(t *testing.T, pkg, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.CommandContext(ctx, "go", "build", "-buildvcs=auto", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// toolbus --version, -version and version print the build's version, the
// one serve reports as serverInfo.version, and never "dev".
func TestVersion(t *testing.T) {
	isolateEnv(t)
	bin := buildTool(t, ".", "toolbus")
	var version string
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, err := exec.CommandContext(t.Context(), bin, args...).Output()
			if err != nil {
				t.Fatalf("toolbus %s: %v", args[0], err)
			}
			v, ok := strings.CutPrefix(strings.TrimSuffix(string(out), "\n"), "toolbus ")
			if !ok || !versionRE.MatchString(v) {
				t.Fatalf("toolbus %s printed %q, want \"toolbus VERSION\"", args[0], out)
			}
			if mv := testenv.ModuleVersion(t, bin); mv != "(devel)" && v != mv {
				t.Errorf("version %q, want the module version %q", v, mv)
			}
			if version != "" && v != version {
				t.Errorf("%q, but another spelling printed %q", v, version)
			}
			version = v
		})
	}
	if version == "" {
		t.FailNow()
	}

	t.Run("serverInfo", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		dir := t.TempDir()
		if out, err := exec.CommandContext(ctx, bin, "init", "--data-dir", dir).CombinedOutput(); err != nil {
			t.Fatalf("init: %v\n%s", err, out)
		}
		out, err := exec.CommandContext(ctx, bin, "token", "create", "--data-dir", dir, "--user", "alice").Output()
		if err != nil {
			t.Fatalf("token create: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		secret := lines[len(lines)-1]

		serve := exec.CommandContext(ctx, bin, "serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0",
			"--log-format", "json")
		stderr, err := serve.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = serve.Process.Signal(os.Interrupt)
			_ = serve.Wait()
		})
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				var line struct{ Msg, HTTP string }
				if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "toolbus started" {
					addr <- line.HTTP
				}
			}
			_, _ = io.Copy(io.Discard, stderr)
		}()
		var base string
		select {
		case a := <-addr:
			base = "http://" + a
		case <-ctx.Done():
			t.Fatal("serve did not log \"toolbus started\"")
		}
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},` +
			`"clientInfo":{"name":"version-test","version":"1"}}}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/mcp", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		// The answer may come as JSON or as one server-sent event.
		if i := bytes.Index(raw, []byte("data: ")); i >= 0 {
			raw = raw[i+len("data: "):]
		}
		var m struct {
			Result struct {
				ServerInfo struct{ Name, Version string } `json:"serverInfo"`
			}
		}
		if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&m); err != nil {
			t.Fatalf("initialize answered %d %q: %v", resp.StatusCode, raw, err)
		}
		if m.Result.ServerInfo.Version != version {
			t.Errorf("serverInfo = %+v, want version %q (what --version prints)", m.Result.ServerInfo, version)
		}
	})
}
