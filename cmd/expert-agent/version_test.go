package main

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/testenv"
)

// versionRE is what buildinfo.Version writes: a module version (a tag or
// a pseudo-version, +dirty for a modified checkout) or "(devel)" with the
// VCS revision and time when the build has them.
var versionRE = regexp.MustCompile(`^(v\d+\.\d+\.\d+\S*|\(devel\)( [0-9a-f]+(\+dirty)?( \S+)?)?)$`)

// expert-agent --version (and bridge --version) prints the build's
// version, the one the agent reports in presence and serverInfo, without
// needing --username. A test binary has no build stamp: the command is
// built, with -buildvcs=auto so that a checkout's revision is stamped
// whatever GOFLAGS says.
func TestVersionFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "expert-agent")
	if out, err := exec.CommandContext(ctx, "go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mod := testenv.ModuleVersion(t, bin)
	for _, args := range [][]string{{"--version"}, {"-version"}, {"bridge", "--version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = []string{"TOOLBUS_AGENT_USERNAME="} // no identity needed
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("expert-agent %s: %v", strings.Join(args, " "), err)
			}
			v, ok := strings.CutPrefix(strings.TrimSuffix(string(out), "\n"), "expert-agent ")
			if !ok || !versionRE.MatchString(v) {
				t.Fatalf("printed %q, want \"expert-agent VERSION\"", out)
			}
			if mod != "(devel)" && v != mod {
				t.Errorf("version %q, want the module version %q", v, mod)
			}
		})
	}
}

// --name is for people: "My Agent" serves (its default client ID is made
// fit for a topic level) and is the name presence reports; the version is
// the build's, never "dev".
func TestRunNameForPeople(t *testing.T) {
	e := testenv.StartBroker(t, testenv.WithReadyCheck())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	online := make(chan contract.Presence, 4)
	if err := e.Broker.Bus().Subscribe(ctx, contract.PresenceFilter, func(_ string, p []byte) {
		var pr contract.Presence
		if json.Unmarshal(p, &pr) == nil && pr.Status == contract.StatusOnline {
			online <- pr
		}
	}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	env := map[string]string{"TOOLBUS_AGENT_PASSWORD": e.AgentPassword}
	go func() {
		done <- run(runCtx, []string{"--broker-url", e.URL, "--username", e.AgentUser, "--name", "My Agent", "--log-level", "error"},
			func(k string) string { return env[k] }, io.Discard)
	}()
	select {
	case p := <-online:
		if p.Name != "My Agent" || !strings.HasPrefix(p.ClientID, "My-Agent-") || p.Version == "dev" || p.Version == "" {
			t.Errorf("presence %+v, want name \"My Agent\", a client ID made of it, and the build's version", p)
		}
	case err := <-done:
		t.Fatalf("run = %v, want it serving as \"My Agent\"", err)
	case <-ctx.Done():
		t.Fatal("the agent never came online")
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v after cancel", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after cancel")
	}
}
