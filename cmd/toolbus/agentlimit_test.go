package main

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// `agents limit NAME 600:50` sets an agent's rate limit, "" lifts it,
// `agents limits` lists them; the same through a running toolbus (whose
// gateway enforces the change at once) and on a data directory (where the
// next start does).
func TestAgentsLimit(t *testing.T) {
	isolateEnv(t)
	liveDir, offDir := t.TempDir(), t.TempDir()
	srv := servertest.Start(t, server.Config{DataDir: liveDir})
	tok := servertest.Token(t, srv, store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin}})
	gw := srv.Handler().(*gateway.Gateway)
	initStore(t, offDir)
	doors := []struct {
		name string
		args []string
	}{
		{"server", []string{"--server", "http://" + srv.HTTPAddr().String(), "--token", tok}},
		{"data-dir", []string{"--data-dir", offDir}},
	}
	jsonOf := map[string]string{}
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			with := func(args ...string) []string { return append(args, d.args...) }
			out := cli(t, with("agents", "limit", "search", "600:50")...)
			if !strings.Contains(out, "agent search: at most 600/min burst 50, all callers together") {
				t.Errorf("agents limit:\n%s", out)
			}
			if stored := strings.Contains(out, "next start or SIGHUP"); stored != (d.name == "data-dir") {
				t.Errorf("agents limit through %s: says it waits for a restart: %v\n%s", d.name, stored, out)
			}
			cli(t, with("agents", "limit", "files", "60")...)
			cli(t, with("agents", "limit", "web", "30:3")...)
			if out := cli(t, with("agents", "limit", "web", "")...); !strings.Contains(out, "agent web has no rate limit of its own") {
				t.Errorf("agents limit web \"\":\n%s", out)
			}
			_, _, err := runCLI(t, with("agents", "limit", "search", "fast")...)
			var apiErr *admin.APIError
			if err == nil || !strings.Contains(err.Error(), `"PER_MINUTE:BURST" (e.g. 600:50)`) ||
				d.name == "server" && (!errors.As(err, &apiErr) || apiErr.Status != 400) {
				t.Errorf("agents limit search fast: %v, want a 400 naming the syntax", err)
			}
			if _, _, err := runCLI(t, with("agents", "limit", "a/b", "60")...); err == nil {
				t.Error("an agent name that is no topic level got a limit")
			}
			if _, _, err := runCLI(t, with("agents", "limit", "search")...); err == nil || !strings.Contains(err.Error(), "toolbus agents limit NAME") {
				t.Errorf("agents limit without a limit: %v", err)
			}
			out = cli(t, with("agents", "limits")...)
			if !strings.HasPrefix(out, "AGENT") || !strings.Contains(out, "600:50") || !strings.Contains(out, "60/min burst 1") || strings.Contains(out, "web") {
				t.Errorf("agents limits:\n%s", out)
			}
			jsonOf[d.name] = cli(t, with("agents", "limits", "--json")...)
			if d.name == "server" {
				want := map[string]gateway.Limit{"search": {PerMinute: 600, Burst: 50}, "files": {PerMinute: 60}}
				if got := gw.AgentLimits(); !maps.Equal(got, want) {
					t.Errorf("the running gateway's agent limits = %v, want %v", got, want)
				}
			}
		})
	}
	if jsonOf["server"] != jsonOf["data-dir"] {
		t.Errorf("agents limits --json differs between the doors:\nserver:   %s\ndata-dir: %s", jsonOf["server"], jsonOf["data-dir"])
	}
	// A toolbus started on the data directory enforces what was stored,
	// and a change made there while it runs from its next reload (SIGHUP).
	srv2 := servertest.Start(t, server.Config{DataDir: offDir})
	gw2 := srv2.Handler().(*gateway.Gateway)
	if got := gw2.AgentLimits(); len(got) != 2 || got["search"] != (gateway.Limit{PerMinute: 600, Burst: 50}) {
		t.Errorf("agent limits after a start on the data directory = %v", got)
	}
	cli(t, "agents", "limit", "files", "", "--data-dir", offDir)
	if err := srv2.Reload(t.Context(), server.Reload{}); err != nil {
		t.Fatal(err)
	}
	if got := gw2.AgentLimits(); len(got) != 1 || got["search"] != (gateway.Limit{PerMinute: 600, Burst: 50}) {
		t.Errorf("agent limits after a change on the data directory and a reload = %v, want search's alone", got)
	}
}
