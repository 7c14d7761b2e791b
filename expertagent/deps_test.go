package expertagent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An agent author imports expertagent (and contract, mcp) for a thermostat
// and must not get the gateway with it: no database driver, no LRU, no
// broker, no router. These packages were in every agent once, through
// contract's topic-level check in acl, and the greeter weighed 16.7 MB.
var gatewayOnly = []string{
	"modernc.org/sqlite",
	"github.com/jackc/pgx",
	"github.com/hashicorp/golang-lru",
	"github.com/mochi-mqtt",
	"github.com/gorilla/mux",
	"github.com/toolbus/toolbus/store",
	"github.com/toolbus/toolbus/acl",
	"github.com/toolbus/toolbus/broker",
	"github.com/toolbus/toolbus/gateway",
	"github.com/toolbus/toolbus/requester",
}

// TestNoGatewayDeps: what `go list -deps` says the SDK's packages pull in
// holds none of the gateway's.
func TestNoGatewayDeps(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps",
		"github.com/toolbus/toolbus/expertagent", "github.com/toolbus/toolbus/contract").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderrOf(err))
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		for _, bad := range gatewayOnly {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("expertagent or contract depends on %s (%s is the gateway's): see `go list -deps` and `go mod why -m`", dep, bad)
			}
		}
	}
}

// maxGreeterBytes bounds the thirty-line agent of docs/agent-sdk.md, built
// with a plain `go build -o` (no -trimpath, no -ldflags): 9.76 MB when the
// SDK stopped pulling in the store, 16.7 MB before.
const maxGreeterBytes = 10_000_000

// TestGreeterSize: the smallest complete agent stays small.
func TestGreeterSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds examples/greeter")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "greeter")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../examples/greeter").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/greeter: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("examples/greeter: %d bytes (at most %d)", fi.Size(), maxGreeterBytes)
	if fi.Size() > maxGreeterBytes {
		t.Errorf("examples/greeter is %d bytes, more than %d: see TestNoGatewayDeps, and what `go list -deps ./examples/greeter` added", fi.Size(), maxGreeterBytes)
	}
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
