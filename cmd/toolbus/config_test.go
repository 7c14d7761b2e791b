package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigCheck: a good file passes; a bad one fails with its file, line
// and setting, the same whether checked alone or given to serve (which
// then refuses to start).
func TestConfigCheck(t *testing.T) {
	isolateEnv(t)
	good := writeFile(t, "good.yaml", "data-dir: "+t.TempDir()+"\ncall-timeout: 5s\nrate-limit:\n  token: \"600:50\"\nallowed-hosts: [gw.example.com]\n")
	if out, errOut, err := runCLI(t, "config", "check", good); err != nil || !strings.Contains(out, "settings ok") {
		t.Fatalf("config check good: %v, stdout %q, stderr %q", err, out, errOut)
	}

	tests := []struct {
		name, text, want string
	}{
		{"unknown setting", "call-timeout: 5s\n\nhttp-adr: x\n", "bad.yaml:3: http-adr: unknown setting; did you mean http-addr?"},
		{"unknown setting, far from any", "call-timeout: 5s\nfrobnicate: x\n", "bad.yaml:2: frobnicate: unknown setting (see the command's -h for the settings)"},
		{"log level typo", "log-levl: debug\n", "bad.yaml:1: log-levl: unknown setting; did you mean log-level?"},
		{"bad duration", "call-timeout: soon\n", `bad.yaml:1: call-timeout: invalid value "soon": want a duration such as 30s, 5m or 1h30m`},
		{"bad rate limit", "rate-limit:\n  user: fast\n", "rate-limit-user"},
		{"bad yaml", "call-timeout: 5s\n  x: y\n", "bad.yaml:2: not valid YAML"},
		{"bad platform id", "platform-id: a/b\n", "platform id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(bad, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := runCLI(t, "config", "check", bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config check: %v, want an error with %q", err, tc.want)
			}
			_, _, err = runCLI(t, "serve", "--config", bad, "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve --config: %v, want a refusal with %q", err, tc.want)
			}
		})
	}
	if _, _, err := runCLI(t, "config", "check"); err == nil {
		t.Fatal("config check without a file passed")
	}
	if _, _, err := runCLI(t, "config", "check", filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestConfigPrecedence: the command line beats the environment, which
// beats the file; the sources are reported that way, secrets masked (a
// broker URL's credentials dropped).
func TestConfigPrecedence(t *testing.T) {
	isolateEnv(t)
	file := writeFile(t, "c.yaml", "call-timeout: 5s\nlist-timeout: 2s\nmax-contexts: 50\nsession-secret: hunter2hunter2\n")
	t.Setenv("TOOLBUS_LIST_TIMEOUT", "3s")
	t.Setenv("TOOLBUS_MAX_CONTEXTS", "60")
	fs := newFlagSet("serve", os.Stderr)
	fs.String(configFlag, "", "")
	fs.Duration("call-timeout", 0, "")
	fs.Duration("list-timeout", 0, "")
	fs.Int("max-contexts", 0, "")
	fs.String("session-secret", "", "")
	fs.String("http-addr", "127.0.0.1:8080", "")
	fs.String("broker-url", "", "")
	src, err := parseCommandFlags(fs, []string{"--config", file, "--max-contexts", "70", "--broker-url", "mqtt://gw:pa55word@broker-a:1883,tcp://broker-b:1883"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range effectiveSettings(fs, src) {
		got[s.Name] = s.Value + " (" + s.Source + ")"
	}
	for name, want := range map[string]string{
		"call-timeout": "5s (file)", "list-timeout": "3s (env)", "max-contexts": "70 (flag)",
		"session-secret": "******** (file)", "http-addr": "127.0.0.1:8080 (default)", "config": file + " (flag)",
		"broker-url": "mqtt://broker-a:1883,tcp://broker-b:1883 (flag)", // the credentials go
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
}

// Every fault of a config file names the file and line, including values
// the flag takes but serve refuses later (a rate limit, a log level), and
// a tab in the indentation.
func TestConfigCheckNamesTheLine(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want string }{
		{"rate limit", "http-addr: 127.0.0.1:0\nrate-limit: {token: \"abc\"}\n", ":2: rate-limit-token: rate limit must be"},
		{"log level", "log-level: loud\n", `:1: log-level: "loud" is not a log level: want debug, info, warn or error`},
		{"tab", "http-addr: a\n\tcall-timeout: 5s\n", ":2: not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := runCLI(t, "config", "check", path)
			if err == nil || !strings.Contains(err.Error(), path+tc.want) {
				t.Errorf("config check: %v, want %q", err, path+tc.want)
			}
		})
	}
	// The same value from a flag names the flag, as before.
	if _, _, err := runCLI(t, "serve", "--check-config", "--log-level", "loud", "--data-dir", dir); err == nil || !strings.HasPrefix(err.Error(), "--log-level:") {
		t.Errorf("serve --log-level loud: %v", err)
	}
}

// A value from the environment that its flag refuses names the variable
// and the value, and what the flag wants; no library's words.
func TestConfigEnvironmentValue(t *testing.T) {
	isolateEnv(t)
	for _, tc := range []struct{ name, env, value, want string }{
		{"duration", "TOOLBUS_CALL_TIMEOUT", "soon", `TOOLBUS_CALL_TIMEOUT: invalid value "soon": want a duration such as 30s, 5m or 1h30m`},
		{"number", "TOOLBUS_MAX_CONTEXTS", "many", `TOOLBUS_MAX_CONTEXTS: invalid value "many": want a whole number`},
		{"log level", "TOOLBUS_LOG_LEVEL", "loud", `--log-level: "loud" is not a log level: want debug, info, warn or error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, _, err := runCLI(t, "serve", "--check-config", "--data-dir", t.TempDir())
			if err == nil || err.Error() != tc.want {
				t.Errorf("serve: %v, want %q", err, tc.want)
			}
		})
	}
}

// A SIGHUP reload that the file fails names the file, line and setting,
// as `toolbus config check` does; the settings reloaded from a good file
// say where they came from.
func TestReloadNamesTheLine(t *testing.T) {
	isolateEnv(t)
	fs := newFlagSet("serve", io.Discard)
	fs.String(configFlag, "", "")
	fs.Bool(checkConfigFlag, false, "")
	fs.String("log-level", "info", "")
	fs.Duration("call-timeout", 0, "")
	for _, f := range rateLimitFlags {
		fs.String(f.name, "", f.usage)
	}
	path := writeFile(t, "toolbus.yaml", "log-level: debug\n")
	src, err := parseCommandFlags(fs, []string{"--config", path})
	if err != nil {
		t.Fatal(err)
	}
	if values, _, err := reloadSettings(fs, src); err != nil || values["log-level"] != (sourcedValue{"debug", "file", path + ":1"}) {
		t.Fatalf("good file: %v, %+v", err, values)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"log level", "call-timeout: 5s\n\nlog-level: loud\n", path + `:3: log-level: "loud" is not a log level: want debug, info, warn or error`},
		{"rate limit", "rate-limit:\n  user: fast\n", path + ":2: rate-limit-user: "},
		{"unknown setting", "log-levl: debug\n", path + ":1: log-levl: unknown setting; did you mean log-level?"},
		{"bad yaml", "log-level: debug\n  x: y\n", path + ":2: not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := reloadSettings(fs, src)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("reload: %v, want %q", err, tc.want)
			}
		})
	}
}
