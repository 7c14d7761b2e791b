package gateway

import (
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

// callIn resolves a tools/call name as agentCall does, for tok in its own
// context, and returns the agent and the name it would reach ("" if none)
// and the error message of an unknown tool.
func callIn(t *testing.T, g *Gateway, tok store.Token, name string) (agent, as, unknown string) {
	t.Helper()
	r := &request{ctx: t.Context(), tok: tok, bus: contract.Context{PlatformID: "gwtest", UserID: tok.UserID,
		SessionID: "tok-" + tok.ID, EntityType: contract.NoEntity, EntityID: contract.NoEntity}}
	tool, ok, err := g.agentToolOf(r, name)
	if err != nil {
		t.Fatalf("route %s: %v", name, err)
	}
	if ok {
		return tool.agent, tool.name, ""
	}
	a := g.agentCall(r, name, time.Now())
	if a.err == nil {
		t.Fatalf("%s: unknown, yet no error", name)
	}
	return "", "", a.err.Message
}

// listedAs lists the agent tools as tok sees them: listed name -> agent.
func listedAs(t *testing.T, g *Gateway, tok store.Token) map[string]string {
	t.Helper()
	tools, err := g.AgentTools(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tl := range tools {
		out[tl.Name] = tl.Agent
	}
	return out
}

// The issue: with `zeta` online serving echo, `alpha` (sorting before it)
// came with an echo of its own, and a client that had been calling echo
// got "unknown tool". A tool keeps its name while its agent stays online;
// the newcomer's is qualified, names are computed over the agents the
// token may use, and an unknown name that one of them serves qualified
// says so.
func TestAgentToolNames(t *testing.T) {
	narrow := store.Token{ID: "tb_narrow", UserID: "alice", Scopes: store.DefaultScopes, Agents: []string{"alpha"}}
	for _, tc := range []struct {
		name   string
		naming string
		check  func(t *testing.T, g *Gateway, agents *fakeAgents)
	}{
		{"incumbent keeps its name", "", func(t *testing.T, g *Gateway, agents *fakeAgents) {
			if agent, as, _ := callIn(t, g, testToken, "echo"); agent != "zeta" || as != "echo" {
				t.Fatalf("before: echo goes to %q as %q", agent, as)
			}
			agents.add("alpha", toolsPage("echo", "solo"))
			names := listedAs(t, g, testToken)
			if names["echo"] != "zeta" || names["alpha.echo"] != "alpha" || names["solo"] != "alpha" || len(names) != 3 {
				t.Fatalf("listed %v", names)
			}
			if agent, _, _ := callIn(t, g, testToken, "echo"); agent != "zeta" {
				t.Fatalf("echo goes to %q", agent)
			}
			// The incumbent goes: the newcomer's echo is listed plainly,
			// and the name its clients saw still calls it.
			agents.gone("zeta")
			names = listedAs(t, g, testToken)
			if names["echo"] != "alpha" || len(names) != 2 {
				t.Fatalf("after zeta went: %v", names)
			}
			if agent, as, _ := callIn(t, g, testToken, "alpha.echo"); agent != "alpha" || as != "echo" {
				t.Fatalf("alpha.echo goes to %q as %q", agent, as)
			}
			// zeta comes back: a newcomer now.
			agents.add("zeta", toolsPage("echo"))
			if names = listedAs(t, g, testToken); names["echo"] != "alpha" || names["zeta.echo"] != "zeta" {
				t.Fatalf("zeta back: %v", names)
			}
		}},
		{"only the agents the token may use", "", func(t *testing.T, g *Gateway, agents *fakeAgents) {
			agents.add("alpha", toolsPage("echo"))
			// An unnarrowed token lists first (the latest union any
			// context got): the narrowed one's call must not use it.
			if names := listedAs(t, g, testToken); names["alpha.echo"] != "alpha" {
				t.Fatalf("unnarrowed: %v", names)
			}
			if agent, _, _ := callIn(t, g, narrow, "echo"); agent != "alpha" {
				t.Fatalf("narrowed token's echo goes to %q", agent)
			}
			if names := listedAs(t, g, narrow); names["echo"] != "alpha" || len(names) != 1 {
				t.Fatalf("narrowed: %v", names)
			}
		}},
		{"the token's agents change", "", func(t *testing.T, g *Gateway, agents *fakeAgents) {
			// One token (one context) whose agents a user's grant changes:
			// the union cached for its old list is not used for the new.
			agents.add("alpha", toolsPage("echo"))
			if names := listedAs(t, g, testToken); names["echo"] != "zeta" || names["alpha.echo"] != "alpha" {
				t.Fatalf("every agent: %v", names)
			}
			granted := testToken
			granted.Agents = []string{"alpha"}
			if names := listedAs(t, g, granted); names["echo"] != "alpha" || len(names) != 1 {
				t.Fatalf("limited to alpha: %v", names)
			}
			if agent, _, _ := callIn(t, g, granted, "echo"); agent != "alpha" {
				t.Fatalf("limited to alpha, echo goes to %q", agent)
			}
			if names := listedAs(t, g, testToken); names["echo"] != "zeta" || len(names) != 2 {
				t.Fatalf("limit lifted: %v", names)
			}
			none := testToken
			none.Agents = []string{}
			if tools, err := g.AgentTools(t.Context(), none); len(tools) != 0 || err == nil {
				t.Fatalf("no agent allowed: %v, %v", tools, err)
			}
		}},
		{"did you mean", "", func(t *testing.T, g *Gateway, agents *fakeAgents) {
			agents.add("alpha", toolsPage("echo", "files.read"))
			if _, _, msg := callIn(t, g, testToken, "files.read"); msg != `unknown tool "files.read"; did you mean "alpha.files.read"?` {
				t.Fatalf("files.read: %s", msg)
			}
			// Not a tool the token may not use.
			zetaOnly := store.Token{ID: "tb_zeta", UserID: "alice", Scopes: store.DefaultScopes, Agents: []string{"zeta"}}
			if _, _, msg := callIn(t, g, zetaOnly, "files.read"); msg != `unknown tool "files.read"` {
				t.Fatalf("zeta-only files.read: %s", msg)
			}
			if _, _, msg := callIn(t, g, testToken, "nothing"); msg != `unknown tool "nothing"` {
				t.Fatalf("nothing: %s", msg)
			}
		}},
		{"always qualify", NamesAlwaysQualify, func(t *testing.T, g *Gateway, agents *fakeAgents) {
			agents.add("alpha", toolsPage("echo"))
			names := listedAs(t, g, testToken)
			if names["zeta.echo"] != "zeta" || names["alpha.echo"] != "alpha" || len(names) != 2 {
				t.Fatalf("listed %v", names)
			}
			if _, _, msg := callIn(t, g, narrow, "echo"); msg != `unknown tool "echo"; did you mean "alpha.echo"?` {
				t.Fatalf("echo: %s", msg)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agents := newFakeAgents(map[string][]string{"zeta": {toolsPage("echo")}})
			g, _ := fakeGateway(t, agents, func(o *Options) { o.AgentToolNames = tc.naming })
			tc.check(t, g, agents)
		})
	}
}

func TestAgentToolNamesOption(t *testing.T) {
	agents := newFakeAgents(map[string][]string{})
	_, err := New(Options{Tokens: noTokens{}, Agents: agents, PlatformID: "gwtest", AgentToolNames: "prefix"})
	if !errors.Is(err, ErrOptions) {
		t.Fatalf("an unknown naming: %v", err)
	}
}
