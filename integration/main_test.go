package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bins holds the paths of the binaries built once for the whole package.
var bins struct {
	toolbus, expertAgent string
}

func TestMain(m *testing.M) {
	if os.Getenv(upstreamEnv) == "stdio" {
		os.Exit(runStdioUpstream()) // a bridge test started this binary as its upstream
	}
	dir, err := os.MkdirTemp("", "toolbus-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.toolbus = filepath.Join(dir, "toolbus")
	bins.expertAgent = filepath.Join(dir, "expert-agent")
	for out, pkg := range map[string]string{bins.toolbus: "../cmd/toolbus", bins.expertAgent: "../cmd/expert-agent"} {
		// -race only where the suite runs with it would slow the binaries; the
		// packages under test here are raced in their own unit tests.
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
