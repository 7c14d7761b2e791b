package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// listedTools lists the agent tools a token sees in a session: listed
// name -> agent.
func listedTools(t *testing.T, e *hostileEnv, tok string, hdr map[string]string) map[string]string {
	t.Helper()
	r := e.post(t, "/api/v1/mcp", tok, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, hdr)
	var list struct {
		Tools []struct {
			Name string            `json:"name"`
			Meta map[string]string `json:"_meta"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.result, &list); err != nil {
		t.Fatalf("tools/list: %d %s", r.status, r.raw)
	}
	out := map[string]string{}
	for _, tl := range list.Tools {
		if a := tl.Meta["io.toolbus/agent"]; a != "" {
			out[tl.Name] = a
		}
	}
	return out
}

// callText calls a tool and returns its text, or the JSON-RPC error's message.
func callText(t *testing.T, e *hostileEnv, tok, name string, hdr map[string]string) string {
	t.Helper()
	r := e.post(t, "/api/v1/mcp", tok, callBody(2, name, map[string]string{}), hdr)
	if r.code != 0 {
		return r.msg
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(r.result, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("tools/call %s: %d %s", name, r.status, r.raw)
	}
	return res.Content[0].Text
}

// The issue, with real agents over the embedded broker: a client calling
// `greet` of the agent `zeta` kept calling it when `alpha` (which sorts
// first) came with a greet of its own; the newcomer's is `alpha.greet`. A
// token limited to alpha sees alpha's as plain `greet`; a dotted tool's
// bare name gets a hint.
func TestToolNamesStableUnderRunningClient(t *testing.T) {
	e := startHostile(t, server.Config{})
	startNamedAgent(t, e.srv, "zeta", "greet")
	sid := e.session(t, e.tok)
	hdr := map[string]string{"Mcp-Session-Id": sid}
	if text := callText(t, e, e.tok, "greet", hdr); !strings.HasPrefix(text, "zeta:greet:") {
		t.Fatalf("greet before alpha: %q", text)
	}

	startNamedAgent(t, e.srv, "alpha", "greet", "notes.get")
	listed := listedTools(t, e, e.tok, hdr)
	if listed["greet"] != "zeta" || listed["alpha.greet"] != "alpha" || listed["alpha.notes.get"] != "alpha" {
		t.Fatalf("union %v", listed)
	}
	if text := callText(t, e, e.tok, "greet", hdr); !strings.HasPrefix(text, "zeta:greet:") {
		t.Fatalf("greet after alpha came: %q", text)
	}
	if text := callText(t, e, e.tok, "alpha.greet", hdr); !strings.HasPrefix(text, "alpha:greet:") {
		t.Fatalf("alpha.greet: %q", text)
	}
	// zeta's greet, listed plainly, is zeta.greet too; the agent gets its own name.
	if text := callText(t, e, e.tok, "zeta.greet", hdr); !strings.HasPrefix(text, "zeta:greet:") {
		t.Fatalf("zeta.greet: %q", text)
	}
	if msg := callText(t, e, e.tok, "notes.get", hdr); msg != `unknown tool "notes.get"; did you mean "alpha.notes.get"?` {
		t.Fatalf("notes.get: %q", msg)
	}

	narrow, _, err := e.srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "hank", Agents: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	nhdr := map[string]string{"Mcp-Session-Id": e.session(t, narrow)}
	if listed := listedTools(t, e, narrow, nhdr); listed["greet"] != "alpha" || listed["alpha.greet"] != "" {
		t.Fatalf("narrowed union %v", listed)
	}
	if text := callText(t, e, narrow, "greet", nhdr); !strings.HasPrefix(text, "alpha:greet:") {
		t.Fatalf("narrowed greet: %q", text)
	}
}

// An agent that ends its connection with a clean DISCONNECT, without
// publishing offline (so no Will), leaves its retained online status: the
// embedded broker clears it, and the gateway stops listing the agent and
// waiting for its tools/list at once, not after three intervals and a
// --list-timeout.
func TestCleanDisconnectWithoutOfflineStopsWaiting(t *testing.T) {
	const listTimeout = 20 * time.Second
	e := startHostile(t, server.Config{ListTimeout: listTimeout})
	ctx := testCtx(t, 10*time.Second)
	if _, err := e.srv.Store().AddIdentity(ctx, "mute", acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	c, err := mqttClient(t, e.srv, "mute", agentPassword, "mute-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	suback(t, c, []string{"ff/v2/mcp/mute/mute-1/+/+/+/+/+/req"}, func(paho.Client, paho.Message) {}) // never answers
	p, _ := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: "mute-1", Since: time.Now().UnixMilli(), Interval: 30000})
	if tok := c.Publish(contract.PresenceTopic("mute", "mute-1"), 1, true, p); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish presence: %v", tok.Error())
	}
	poll(t, 10*time.Second, "mute online", func() bool { return agentOnline(e.srv, "mute-1") })
	c.Disconnect(250) // clean: the broker sends no Will
	poll(t, 10*time.Second, "mute offline", func() bool { return !agentOnline(e.srv, "mute-1") })

	hdr := map[string]string{"Mcp-Session-Id": e.session(t, e.tok)}
	start := time.Now()
	listed := listedTools(t, e, e.tok, hdr)
	if took := time.Since(start); took >= listTimeout/2 {
		t.Fatalf("tools/list took %v: it waited for the gone agent", took)
	}
	for name, agent := range listed {
		if agent == "mute" {
			t.Fatalf("the gone agent's %s is listed", name)
		}
	}
}
