package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func serveLikeFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("http-addr", "127.0.0.1:8080", "")
	fs.Duration("call-timeout", 30*time.Second, "")
	fs.Int("max-contexts", 10000, "")
	fs.String("allowed-hosts", "", "")
	fs.String("rate-limit-token", "", "")
	fs.String("rate-limit-user", "", "")
	fs.String("config", "", "")
	return fs
}

func TestParseAndApply(t *testing.T) {
	const text = `# a comment
http-addr: 127.0.0.1:9090
call-timeout: 5s
max-contexts: 500
allowed-hosts: [gw.example.com, gw2.example.com]
rate-limit:
  token: "600:50"
  user: 6000
`
	f, err := Parse("toolbus.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	fs := serveLikeFlags()
	if err := fs.Parse([]string{"--max-contexts", "7"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(fs, "config"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"http-addr": "127.0.0.1:9090", "call-timeout": "5s", "max-contexts": "7", // the command line wins
		"allowed-hosts": "gw.example.com,gw2.example.com", "rate-limit-token": "600:50", "rate-limit-user": "6000",
	} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// TestErrorsNameTheLine: every fault comes back as an *Error with the line
// at fault and, where there is one, the setting.
func TestErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name, text string
		line       int
		key        string
		is         error
		msg        string
	}{
		{name: "unknown key", text: "http-addr: x\n\nhttp-adr: y\n", line: 3, key: "http-adr", is: ErrUnknownKey, msg: "did you mean http-addr?"},
		{name: "unknown key, no near one", text: "frobnicate: y\n", line: 1, key: "frobnicate", is: ErrUnknownKey, msg: "unknown setting (see the command's -h for the settings)"},
		{name: "bad duration", text: "call-timeout: 5 seconds\n", line: 1, key: "call-timeout", msg: `invalid value "5 seconds": want a duration such as 30s`},
		{name: "bad int", text: "http-addr: a\nmax-contexts: many\n", line: 2, key: "max-contexts", msg: `invalid value "many": want a whole number`},
		{name: "nested unknown", text: "rate-limit:\n  tokens: 5\n", line: 2, key: "rate-limit-tokens", is: ErrUnknownKey},
		{name: "set twice", text: "http-addr: a\nhttp-addr: b\n", line: 2, key: "http-addr", msg: "set twice (first on line 1)"},
		{name: "yaml syntax", text: "http-addr: a\ncall-timeout: 5s\n  max-contexts: 3\n", line: 3, msg: "not valid YAML"},
		{name: "unterminated quote", text: "http-addr: a\ncall-timeout: '5s\n", line: 2, msg: "not valid YAML"},
		{name: "tab indentation", text: "rate-limit:\n\ttoken: 5\n", line: 2, msg: "not valid YAML"},
		{name: "not a mapping", text: "- http-addr\n", line: 1, msg: "mapping"},
		{name: "config itself", text: "config: other.yaml\n", line: 1, key: "config", is: ErrUnknownKey},
		{name: "list of maps", text: "allowed-hosts:\n  - a: b\n", line: 2, key: "allowed-hosts", msg: "plain values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("bad.yaml", []byte(tc.text))
			if err == nil {
				err = f.Apply(serveLikeFlags(), "config")
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want *config.Error", err, err)
			}
			if ce.Line != tc.line || ce.Key != tc.key || ce.File != "bad.yaml" {
				t.Errorf("error at %s:%d key %q, want bad.yaml:%d key %q (%v)", ce.File, ce.Line, ce.Key, tc.line, tc.key, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "bad.yaml:") {
				t.Errorf("error %q, want it to start with the file:line and mention %q", err, tc.msg)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want os.ErrNotExist", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("# nothing set\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(empty)
	if err != nil || len(f.Settings) != 0 {
		t.Fatalf("empty file: %+v, %v", f, err)
	}
	null := filepath.Join(t.TempDir(), "null.yaml")
	if err := os.WriteFile(null, []byte("http-addr:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err = Load(null); err != nil || len(f.Settings) != 0 {
		t.Fatalf("key without value: %+v, %v; want it left at its default", f, err)
	}
}

// FuzzParse: no input makes Parse panic, and every error it returns says
// which file.
func FuzzParse(f *testing.F) {
	f.Add([]byte("http-addr: a\nrate-limit:\n  token: 5\n"))
	f.Add([]byte("a: [1, 2]\n"))
	f.Add([]byte("&x a: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Parse("f.yaml", data); err != nil && !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}
