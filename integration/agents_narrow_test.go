package integration

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// agentsSeen is what GET /api/v1/agents (and platform_agents) shows: the
// agents of the instances, and the agents of the tools.
type agentsSeen struct {
	Agents []struct {
		Agent    string `json:"agent"`
		ClientID string `json:"clientId"`
	} `json:"agents"`
	Tools []struct {
		Agent string `json:"agent"`
	} `json:"tools"`
}

// agents lists the distinct agents of the instances and of the tools.
func (a agentsSeen) agents() (instances, tools []string) {
	for _, x := range a.Agents {
		if !slices.Contains(instances, x.Agent) {
			instances = append(instances, x.Agent)
		}
	}
	for _, x := range a.Tools {
		if !slices.Contains(tools, x.Agent) {
			tools = append(tools, x.Agent)
		}
	}
	slices.Sort(instances)
	slices.Sort(tools)
	return instances, tools
}

// TestAgentsOfLimitedTokens: a token limited to some agents, by its own
// list or by its user's grant (`toolbus agents grant`), sees those agents'
// instances (names, client IDs, versions) and tools alone, through GET
// /api/v1/agents and through the platform_agents tool; an unlimited token
// sees every agent.
func TestAgentsOfLimitedTokens(t *testing.T) {
	e := startMany(t, false, server.Config{})
	if err := e.g.srv.Store().SetUserAgents(testCtx(t, 10*time.Second), "gina", []string{agBeta}); err != nil {
		t.Fatal(err)
	}
	all := []string{agAlpha, agBeta, agPool}
	for _, tc := range []struct {
		name string
		spec store.TokenSpec
		want []string
	}{
		{"own list", store.TokenSpec{UserID: "dana", Agents: []string{agAlpha}}, []string{agAlpha}},
		{"own list of two", store.TokenSpec{UserID: "dana", Agents: []string{agAlpha, agPool}}, []string{agAlpha, agPool}},
		{"user's grant", store.TokenSpec{UserID: "gina"}, []string{agBeta}},
		{"own list within the grant", store.TokenSpec{UserID: "gina", Agents: []string{agAlpha, agBeta}}, []string{agBeta}},
		{"not limited", store.TokenSpec{UserID: "dana"}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := e.g.token(t, tc.spec)
			check := func(how string, body []byte) {
				t.Helper()
				var seen agentsSeen
				if err := json.Unmarshal(body, &seen); err != nil {
					t.Fatalf("%s: %v: %s", how, err, body)
				}
				instances, tools := seen.agents()
				if !slices.Equal(instances, tc.want) || !slices.Equal(tools, tc.want) {
					t.Errorf("%s: instances of %v, tools of %v; want %v alone\n%s", how, instances, tools, tc.want, body)
				}
			}

			req, err := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, e.g.base+platformtools.PathAgents, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body json.RawMessage
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d, %v", platformtools.PathAgents, resp.StatusCode, err)
			}
			check("GET "+platformtools.PathAgents, body)

			cs := e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", nil)
			res, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: platformtools.ToolAgents})
			if err != nil || res.IsError {
				t.Fatalf("%s: %+v, %v", platformtools.ToolAgents, res, err)
			}
			sc, err := json.Marshal(res.StructuredContent)
			if err != nil {
				t.Fatal(err)
			}
			check(platformtools.ToolAgents, sc)
		})
	}
}
