package main

import (
	"bytes"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Every command and group the usage lists answers -h, -help and --help
// with its usage on stdout, nothing on stderr, and success (exit 0): a
// help request is not an error, and never runs the command.
func TestHelpEverywhere(t *testing.T) {
	isolateEnv(t)
	paths := append([][]string{{}, {"token"}, {"mqtt-user"}, {"acl"}, {"acl", "rule"}, {"contexts"}, {"config"}}, commandPaths()...)
	if len(paths) < 25 {
		t.Fatalf("only %d command paths read from the usage", len(paths))
	}
	for _, path := range paths {
		for _, flag := range []string{"-h", "-help", "--help"} {
			args := append(append([]string{}, path...), flag)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				out, errOut, err := runCLI(t, args...)
				if err != nil || errOut != "" || !strings.Contains(strings.ToLower(out), "usage") {
					t.Errorf("err %v, stderr %q, stdout %q", err, errOut, out)
				}
			})
		}
	}
	// Help after other flags still wins, and runs nothing.
	if out, _, err := runCLI(t, "token", "create", "--user", "x", "--help"); err != nil || !strings.Contains(out, "-user") {
		t.Errorf("token create --user x --help: %v %q", err, out)
	}
}

// A typo in a command or a flag is one line on stderr that names the
// nearest spelling, exit 2: not the usage with the error before and after
// it. Every command of the usage refuses an unknown flag that way; the
// built binary, as an operator sees it. -h still prints the usage.
func TestTyposAreOneLine(t *testing.T) {
	isolateEnv(t)
	bin := buildTool(t, ".", "toolbus")
	config := writeFile(t, "c.yaml", "call-timeout: 5s\n")
	tests := []struct {
		args []string
		want string // the whole of stderr
	}{
		{[]string{"serve", "--http-adr", "127.0.0.1:0"}, "toolbus: flag provided but not defined: --http-adr; did you mean --http-addr?\n"},
		{[]string{"token", "create", "-usr", "x"}, "toolbus: flag provided but not defined: --usr; did you mean --user?\n"},
		{[]string{"serve", "--bogus"}, "toolbus: flag provided but not defined: --bogus (-h lists the flags)\n"},
		{[]string{"serve", "--call-timeout", "soon"}, `toolbus: --call-timeout: invalid value "soon": want a duration such as 30s, 5m or 1h30m` + "\n"},
		{[]string{"tokn", "list"}, `toolbus: unknown command "tokn"; did you mean "token"?` + "\n"},
		{[]string{"frobnicate"}, `toolbus: unknown command "frobnicate" ('toolbus --help' lists the commands)` + "\n"},
		{[]string{"token", "crate"}, `toolbus: token: unknown subcommand "crate"; did you mean "create"?` + "\n"},
		{[]string{"acl", "rule", "ad"}, `toolbus: acl rule: unknown subcommand "ad"; did you mean "add"?` + "\n"},
		{[]string{"agents", "grnt"}, `toolbus: agents: unknown subcommand "grnt"; did you mean "grant"?` + "\n"},
		{[]string{"contexts", "zap"}, `toolbus: contexts: unknown subcommand "zap" (want list or evict)` + "\n"},
		{[]string{"--data-dir", "x", "token", "list"}, "toolbus: --data-dir before the command: flags come after it, toolbus <command> [flags] ('toolbus --help' lists the commands)\n"},
		{[]string{"config", "check", config, "extra"}, "toolbus: want: toolbus config check FILE (one file)\n"},
	}
	for _, path := range commandPaths() {
		if path[0] == "help" {
			continue // the usage, whatever follows
		}
		args := append(append([]string{}, path...), "--no-such-flag")
		if slices.Equal(path, []string{"config", "check"}) {
			args = []string{"config", "check", config, "--no-such-flag"}
			tests = append(tests, struct {
				args []string
				want string
			}{args, "toolbus: want: toolbus config check FILE (one file)\n"})
			continue
		}
		tests = append(tests, struct {
			args []string
			want string
		}{args, "toolbus: flag provided but not defined: --no-such-flag (-h lists the flags)\n"})
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, tc.args...)
			cmd.Dir = t.TempDir() // nothing is created in ./data by a refusal
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
			if errOut.String() != tc.want || out.Len() != 0 {
				t.Errorf("stderr %q, want %q; stdout %q", errOut.String(), tc.want, out.String())
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		out, err := exec.CommandContext(t.Context(), bin, "serve", "-h").Output()
		if err != nil || !strings.Contains(string(out), "-http-addr") {
			t.Errorf("serve -h: %v, %q", err, out)
		}
	})
}

// The suggestions come from the usage's command table, which lists every
// command dispatch takes.
func TestCheckCommand(t *testing.T) {
	for _, path := range commandPaths() {
		if err := checkCommand(append(path, "--json")); err != nil {
			t.Errorf("%v: %v", path, err)
		}
	}
	for _, args := range [][]string{{}, {"--version"}, {"-h"}, {"agents", "extra"}, {"config", "check", "FILE"}, {"version", "x"}} {
		if err := checkCommand(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}
