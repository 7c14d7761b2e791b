package main

import (
	"strings"
	"testing"
)

// Every command and group the usage lists answers -h, -help and --help
// with its usage on stdout, nothing on stderr, and success (exit 0): a
// help request is not an error, and never runs the command.
func TestHelpEverywhere(t *testing.T) {
	isolateEnv(t)
	paths := [][]string{{}, {"help"}, {"token"}, {"mqtt-user"}, {"acl"}, {"acl", "rule"}, {"contexts"}, {"config"}}
	for _, line := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		words, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		var path []string
		for _, w := range strings.Fields(words) {
			if w != strings.ToUpper(w) { // FILE and the like are arguments
				path = append(path, w)
			}
		}
		paths = append(paths, path)
	}
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
