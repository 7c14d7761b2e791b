package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/server"
)

// serve --check-config finds a data directory that cannot be created, and
// creates none itself.
func TestServeCheckConfigDataDir(t *testing.T) {
	isolateEnv(t)
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		ok        bool
	}{
		{"existing directory", base, true},
		{"new, nested", filepath.Join(base, "new", "data"), true},
		{"a file", file, false},
		{"under a file", filepath.Join(file, "data"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCLI(t, "serve", "--check-config", "--data-dir", tc.dir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0")
			if tc.ok {
				if err != nil || !strings.Contains(out, "settings ok") {
					t.Fatalf("err %v, out %q; want settings ok", err, out)
				}
				return
			}
			if !errors.Is(err, server.ErrDataDir) || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), file) {
				t.Fatalf("err = %v; want ErrDataDir naming --data-dir and %s", err, file)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--check-config created the data directory (%v)", err)
	}
	if left, _ := filepath.Glob(filepath.Join(base, ".toolbus-check-*")); len(left) > 0 {
		t.Errorf("probes left behind: %v", left)
	}
}
