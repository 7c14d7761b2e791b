package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A typo in a flag or the subcommand, and flags given before `bridge`, are
// one line on stderr that says what to type instead, exit 1: not the usage
// around the error. -h still prints the usage. The built binary, as an
// operator sees it.
func TestCommandLineMistakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "expert-agent")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bridgeFirst := `expert-agent: "bridge" must come first, before its flags: expert-agent bridge [flags] -- COMMAND [ARG...] ` +
		`(flags before "bridge" are the reference agent's)` + "\n"
	tests := []struct {
		name string
		args []string
		want string // the whole of stderr
	}{
		{"flag typo", []string{"--usrname", "a1"}, "expert-agent: flag provided but not defined: --usrname; did you mean --username?\n"},
		{"unknown flag", []string{"--frobnicate"}, "expert-agent: flag provided but not defined: --frobnicate (-h lists the flags)\n"},
		{"bad value", []string{"--username", "a1", "--concurrency", "many"}, `expert-agent: --concurrency: invalid value "many": want a whole number` + "\n"},
		{"bridge flag typo", []string{"bridge", "--username", "a1", "--upstream-ulr", "http://127.0.0.1:1/mcp"},
			"expert-agent: flag provided but not defined: --upstream-ulr; did you mean --upstream-url?\n"},
		{"subcommand typo", []string{"brige", "--username", "a1"}, `expert-agent: unknown subcommand "brige"; did you mean "bridge"?` + "\n"},
		{"flags before bridge", []string{"--username", "a1", "bridge", "--", "server"}, bridgeFirst},
		{"flags before bridge, no username", []string{"--log-level", "debug", "bridge", "--upstream-url", "http://127.0.0.1:1/mcp"}, bridgeFirst},
		{"other stray word", []string{"--username", "a1", "serve"}, `expert-agent: unexpected arguments: ["serve"]` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = []string{} // no TOOLBUS_AGENT_* from the test's environment
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1", err)
			}
			if errOut.String() != tc.want || out.Len() != 0 {
				t.Errorf("stderr %q, want %q; stdout %q", errOut.String(), tc.want, out.String())
			}
		})
	}
	for _, args := range [][]string{{"-h"}, {"bridge", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = []string{}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "-username") {
				t.Errorf("expert-agent %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}
