package envflag_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/envflag"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantN   int
		wantErr string
	}{
		{name: "default", want: "d", wantN: 1},
		{name: "from env", env: map[string]string{"X_HTTP_ADDR": "e", "X_COUNT": "7"}, want: "e", wantN: 7},
		{name: "flag wins", args: []string{"--http-addr", "f"}, env: map[string]string{"X_HTTP_ADDR": "e"}, want: "f", wantN: 1},
		{name: "empty env ignored", env: map[string]string{"X_HTTP_ADDR": ""}, want: "d", wantN: 1},
		{name: "bad value", env: map[string]string{"X_COUNT": "many"}, wantErr: "X_COUNT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			addr := fs.String("http-addr", "d", "")
			n := fs.Int("count", 1, "")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := envflag.Apply(fs, "X_", func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || *addr != tc.want || *n != tc.wantN {
				t.Fatalf("got %q %d %v, want %q %d", *addr, *n, err, tc.want, tc.wantN)
			}
		})
	}
}

func TestApplyNamesTheValue(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("call-timeout", 0, "")
	err := envflag.Apply(fs, "X_", func(string) string { return "soon" })
	if want := `X_CALL_TIMEOUT: invalid value "soon": want a duration such as 30s, 5m or 1h30m`; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// Parse returns an error in one line and prints nothing; -h prints the
// usage, as fs.Parse would.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{name: "typo", args: []string{"--http-adr", "x"}, want: "flag provided but not defined: --http-adr; did you mean --http-addr?"},
		{name: "single dash typo", args: []string{"-cont", "3"}, want: "flag provided but not defined: --cont; did you mean --count?"},
		{name: "unknown", args: []string{"--frobnicate"}, want: "flag provided but not defined: --frobnicate (-h lists the flags)"},
		{name: "number", args: []string{"--count", "many"}, want: `--count: invalid value "many": want a whole number`},
		{name: "out of range", args: []string{"--count", "99999999999999999999"}, want: `--count: invalid value "99999999999999999999": out of range`},
		{name: "bool", args: []string{"--json=maybe"}, want: `--json: invalid value "maybe": want true or false`},
		{name: "own type", args: []string{"--mode", `"x"`}, want: `--mode: invalid value "\"x\"": want a or b`},
		{name: "no value", args: []string{"--count"}, want: "flag needs an argument: --count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			fs := newFlagSet(&out)
			err := envflag.Parse(fs, tc.args)
			if err == nil || err.Error() != tc.want || out.Len() != 0 {
				t.Fatalf("err = %v, want %q; printed %q", err, tc.want, out.String())
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		var out strings.Builder
		fs := newFlagSet(&out)
		if err := envflag.Parse(fs, []string{"--count", "2", "-h"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "Usage of t:") || !strings.Contains(out.String(), "-http-addr") {
			t.Fatalf("err = %v, printed %q", err, out.String())
		}
		out.Reset()
		fs.Usage = func() { fmt.Fprintln(fs.Output(), "own usage") }
		if err := envflag.Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) || out.String() != "own usage\n" {
			t.Fatalf("err = %v, printed %q", err, out.String())
		}
	})
}

func newFlagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.String("http-addr", "", "")
	fs.Int("count", 0, "")
	fs.Bool("json", false, "")
	fs.Func("mode", "a or b", func(s string) error {
		if s != "a" && s != "b" {
			return errors.New("want a or b")
		}
		return nil
	})
	return fs
}

func TestSuggest(t *testing.T) {
	names := []string{"serve", "token", "user", "log-level", "log-format", "http-addr", "mqtt-addr"}
	for _, tc := range []struct{ word, want string }{
		{"tokn", "token"},
		{"toekn", "token"}, // swapped
		{"usr", "user"},
		{"log-levl", "log-level"},
		{"LOG-LEVEL", "log-level"},
		{"http-adr", "http-addr"},
		{"mqt-adr", "mqtt-addr"},
		{"x", ""},
		{"frobnicate", ""},
		{"use", "user"},
		{"tk", ""}, // too short for two edits
	} {
		t.Run(tc.word, func(t *testing.T) {
			if got := envflag.Suggest(tc.word, names); got != tc.want {
				t.Errorf("Suggest(%q) = %q, want %q", tc.word, got, tc.want)
			}
		})
	}
}
