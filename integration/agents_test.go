package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testenv"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The agents of the many-agents tests: alpha and beta are expert-agent
// processes serving subsets of the reference tools, pool is two SDK
// instances of one agent. alpha and pool both serve echo.
const (
	agAlpha, agBeta, agPool = "alpha", "beta", "pool"
	agGateway               = "gw-many"
)

// agentTools is the union of the three agents' tools as the gateway lists
// them: echo is held twice; alpha, online first, keeps the name, and
// pool's is qualified with its agent's name.
var agentTools = []string{"countdown", "echo", "pool.echo", "sha256", "time_now", "whoami_instance", "word_count"}

// ownerOf says which agent serves each of agentTools.
var ownerOf = map[string]string{"echo": agAlpha, "countdown": agAlpha, "word_count": agAlpha,
	"sha256": agBeta, "time_now": agBeta, "pool.echo": agPool, "whoami_instance": agPool}

// manyEnv is a gateway and the three agents, on the embedded broker or on
// Mosquitto configured from `toolbus acl export`.
type manyEnv struct {
	g        *gwEnv
	broker   string   // the agents' broker URL
	poolIDs  []string // client IDs of pool's instances
	stopBeta func()
}

// startMany starts the gateway and the agents. With mosquitto, the
// identities are exported from the gateway's store and Mosquitto runs on them.
func startMany(t *testing.T, mosquitto bool, cfg server.Config) *manyEnv {
	t.Helper()
	ids := map[string]acl.Role{agAlpha: acl.RoleExpertAgent, agBeta: acl.RoleExpertAgent, agPool: acl.RoleExpertAgent,
		"silent": acl.RoleExpertAgent, "delta": acl.RoleExpertAgent, agGateway: acl.RolePlatform}
	e := &manyEnv{}
	if mosquitto {
		testenv.MosquittoBinary(t)
		dataDir, files := t.TempDir(), t.TempDir()
		ctx := testCtx(t, 30*time.Second)
		st, err := store.Open(ctx, dataDir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
		if err != nil {
			t.Fatal(err)
		}
		for name, role := range ids {
			if _, err := st.AddIdentity(ctx, name, role, []byte(agentPassword)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, bins.toolbus, "acl", "export", "--data-dir", dataDir, "--out", files).CombinedOutput(); err != nil {
			t.Fatalf("acl export: %v\n%s", err, out)
		}
		mosq := testenv.StartMosquitto(t, testenv.MosquittoOptions{Dir: files})
		cfg.DataDir, cfg.BrokerURL = dataDir, mosq.URL
		cfg.BrokerUsername, cfg.BrokerPassword = agGateway, agentPassword
		srv := startServer(t, cfg)
		e.g = &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
		e.broker = mosq.URL
	} else {
		srv := startServer(t, cfg)
		ctx := testCtx(t, 10*time.Second)
		for name, role := range ids {
			if _, err := srv.Store().AddIdentity(ctx, name, role, []byte(agentPassword)); err != nil {
				t.Fatal(err)
			}
		}
		e.g = &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
		e.broker = "tcp://" + srv.MQTTAddr().String()
	}
	startToolsAgent(t, e.broker, agAlpha, "echo,word_count,countdown")
	// alpha comes before pool, so that echo is alpha's.
	poll(t, 15*time.Second, "alpha online", func() bool { return agentOnline(e.g.srv, agAlpha+"-1") })
	e.stopBeta = startToolsAgent(t, e.broker, agBeta, "sha256,time_now")
	for i := range 2 {
		id := fmt.Sprintf("pool-%d", i+1)
		e.poolIDs = append(e.poolIDs, id)
		startPoolInstance(t, e.broker, id)
	}
	e.waitTools(t, agentTools)
	return e
}

// startToolsAgent runs the expert-agent binary as agent name, serving tools;
// the returned function stops it (SIGTERM) and waits.
func startToolsAgent(t *testing.T, brokerURL, name, tools string) func() {
	t.Helper()
	p := startProc(t, nil, bins.expertAgent, "--broker-url", brokerURL, "--username", name, "--password", agentPassword,
		"--client-id", name+"-1", "--tools", tools, "--log-level", "warn")
	var once sync.Once
	return func() {
		once.Do(func() {
			if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
}

// startPoolInstance runs one instance of the pool agent in-process: its
// echo says "pool:" before the text, and whoami_instance says its client ID.
func startPoolInstance(t *testing.T, brokerURL, clientID string, exclusive ...bool) {
	t.Helper()
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: brokerURL, Username: agPool, Password: agentPassword, ClientID: clientID, Name: "pool",
		Exclusive: len(exclusive) > 0 && exclusive[0],
		Logger:    testLogger(t).WithField("component", "pool"),
	})
	yes := true
	for _, tool := range []expertagent.Tool{
		{Tool: tbmcp.Tool{Name: "echo", Description: "Echoes, prefixed.", Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
			Handler: func(_ context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				var args struct{ Text string }
				if err := req.Bind(&args); err != nil {
					return nil, err
				}
				return tbmcp.TextResult("pool:" + args.Text), nil
			}},
		{Tool: tbmcp.Tool{Name: "whoami_instance", Description: "Says which instance answered.", Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes}},
			Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				return tbmcp.TextResult(clientID), nil
			}},
	} {
		if err := a.AddTool(tool); err != nil {
			t.Fatal(err)
		}
	}
	runUntilCleanup(t, "pool instance "+clientID, a.Run)
}

// unionAgentTools lists the tools of a list that some agent serves (those
// with _meta io.toolbus/agent), sorted.
func unionAgentTools(list *mcp.ListToolsResult) []string {
	var names []string
	for _, tool := range list.Tools {
		if tool.Meta != nil && tool.Meta["io.toolbus/agent"] != nil {
			names = append(names, tool.Name)
		}
	}
	slices.Sort(names)
	return names
}

// waitTools waits until a new session lists exactly want as agent tools.
func (e *manyEnv) waitTools(t *testing.T, want []string) {
	t.Helper()
	tok := e.g.token(t, store.TokenSpec{UserID: "watcher"})
	var got []string
	poll(t, 20*time.Second, fmt.Sprintf("agent tools %v", want), func() bool {
		cs := e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", nil)
		defer cs.Close()
		list, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
		if err != nil {
			return false
		}
		got = unionAgentTools(list)
		return slices.Equal(got, want)
	})
}

// Three distinct agents, one of them a pool of two: every list is the same
// full union, and each of 600 calls over 20 sessions is answered once, by
// the agent that owns the tool, to its caller.
func TestManyAgents(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mosquitto bool
	}{{"embedded broker", false}, {"mosquitto", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startMany(t, tc.mosquitto, server.Config{})
			tok := e.g.token(t, store.TokenSpec{UserID: "alice"})
			const sessions, callsPer = 20, 30
			css := make([]*mcp.ClientSession, sessions)
			for i := range css {
				css[i] = e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", nil)
			}

			for i := range 50 {
				list, err := css[i%sessions].ListTools(testCtx(t, 10*time.Second), nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := unionAgentTools(list); !slices.Equal(got, agentTools) {
					t.Fatalf("list %d: agent tools %v, want %v", i, got, agentTools)
				}
				for _, tool := range list.Tools {
					if agent, _ := tool.Meta["io.toolbus/agent"].(string); agent != "" && agent != ownerOf[tool.Name] {
						t.Fatalf("tool %s says agent %q, want %q", tool.Name, agent, ownerOf[tool.Name])
					}
				}
			}

			before := e.g.srv.Requester().Stats()
			var mu sync.Mutex
			instances := map[string]int{}
			var wg sync.WaitGroup
			errs := make(chan error, sessions*callsPer)
			for s, cs := range css {
				wg.Go(func() {
					for c := range callsPer {
						if err := callOwned(t, cs, s, c, e.poolIDs, func(id string) { mu.Lock(); instances[id]++; mu.Unlock() }); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			after := e.g.srv.Requester().Stats()
			if d, m := after.Duplicates-before.Duplicates, after.Mismatched-before.Mismatched; d != 0 || m != 0 {
				t.Errorf("%d duplicate and %d mismatched replies: some call was answered twice or by another agent", d, m)
			}
			if len(instances) != 2 {
				t.Errorf("whoami_instance answered by %v: want both pool instances to share the work", instances)
			}
		})
	}
}

// callOwned makes call number c of session s: one of the six tools in turn,
// checking the answer is the owning agent's.
func callOwned(t *testing.T, cs *mcp.ClientSession, s, c int, poolIDs []string, sawInstance func(string)) error {
	text := fmt.Sprintf("s%d-c%d", s, c)
	tool := agentTools[(s+c)%len(agentTools)]
	args := map[string]any{"text": text}
	switch tool {
	case "time_now", "whoami_instance":
		args = nil
	case "countdown":
		args = map[string]any{"seconds": 1}
	}
	res, err := cs.CallTool(testCtx(t, 20*time.Second), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	if res.IsError || len(res.Content) == 0 {
		return fmt.Errorf("%s: %+v", tool, res)
	}
	got := res.Content[0].(*mcp.TextContent).Text
	sum := sha256.Sum256([]byte(text))
	want := map[string]string{"echo": text, "pool.echo": "pool:" + text, "sha256": hex.EncodeToString(sum[:]),
		"countdown": "countdown of 1 finished"}[tool]
	switch {
	case tool == "whoami_instance":
		if !slices.Contains(poolIDs, got) {
			return fmt.Errorf("whoami_instance answered %q, not a pool instance", got)
		}
		sawInstance(got)
	case tool == "word_count":
		if !strings.Contains(got, "1 word") && !strings.Contains(got, `"words":1`) && !strings.Contains(got, "words") {
			return fmt.Errorf("word_count answered %q", got)
		}
	case want != "" && got != want:
		return fmt.Errorf("%s(%q) answered %q, want %q", tool, text, got, want)
	}
	return nil
}

// A silent agent (it connects, announces itself and never answers) beside
// a healthy one: lists come back with the healthy agent's tools, the
// silent one is counted, and an unknown tool is -32602.
func TestSilentAgent(t *testing.T) {
	e := startMany(t, false, server.Config{ListTimeout: 500 * time.Millisecond})
	silent := mqttAgentClient(t, e.broker, "silent", "silent-1", nil)
	mustToken(t, silent.Subscribe(contract.SharedRequestFilter("silent"), 1, nil))
	mustToken(t, silent.Publish(contract.PresenceTopic("silent", "silent-1"), 1, true, []byte(`{"status":"online"}`)))
	poll(t, 10*time.Second, "the silent agent online", func() bool {
		return slices.Contains(e.g.srv.Requester().OnlineAgents(context.Background()), "silent")
	})

	tok := e.g.token(t, store.TokenSpec{UserID: "bob"})
	failsBefore := e.g.srv.Handler().(*gateway.Gateway).Stats().AgentListFailures
	for i := range 3 {
		cs := e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", nil)
		list, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := unionAgentTools(list); !slices.Equal(got, agentTools) {
			t.Errorf("list %d beside a silent agent: %v, want %v", i, got, agentTools)
		}
		_, err = cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "no_such_tool"})
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("unknown tool: err = %v, want -32602", err)
		}
	}
	if fails := e.g.srv.Handler().(*gateway.Gateway).Stats().AgentListFailures; fails <= failsBefore {
		t.Errorf("agent list failures %d -> %d: the silent agent was not counted", failsBefore, fails)
	}
}

// mqttAgentClient connects a plain paho client as an agent identity.
func mqttAgentClient(t *testing.T, brokerURL, username, clientID string, inbox chan<- paho.Message) paho.Client {
	t.Helper()
	c, err := dialMQTT(t, brokerURL, username, agentPassword, clientID, inbox)
	if err != nil {
		t.Fatalf("connect %s: %v", username, err)
	}
	return c
}

// The broker keeps agents apart: beta cannot read alpha's requests, nor
// answer a call routed to alpha under alpha's name; an answer under its
// own name is dropped by the gateway. The call gets alpha's answer.
func TestAgentIsolation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mosquitto bool
	}{{"embedded broker", false}, {"mosquitto", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startMany(t, tc.mosquitto, server.Config{})
			// A second connection of alpha's own identity sees alpha's
			// requests (a plain subscription gets a copy): the test's way
			// to learn a call's correlation ID.
			spied := make(chan paho.Message, 16)
			spy := mqttAgentClient(t, e.broker, agAlpha, "alpha-spy", spied)
			mustToken(t, spy.Subscribe(contract.RequestFilter(agAlpha, contract.AnyInstance), 1, nil))

			betaIn := make(chan paho.Message, 16)
			mallory := mqttAgentClient(t, e.broker, agBeta, "beta-mallory", betaIn)
			for _, f := range []string{contract.RequestFilter(agAlpha, contract.AnyInstance), contract.RequestFilter(agAlpha, "+"),
				contract.SharedRequestFilter(agAlpha), "$share/beta/" + contract.RequestFilter(agAlpha, contract.AnyInstance),
				contract.TopicPrefix + "#", contract.PresenceFilter} {
				mallory.Subscribe(f, 1, nil).WaitTimeout(5 * time.Second) // refused or not: what arrives tells
			}
			mustToken(t, mallory.Subscribe(contract.RequestFilter(agBeta, "beta-mallory"), 1, nil))

			tok := e.g.token(t, store.TokenSpec{UserID: "carol"})
			cs := e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", nil)
			before := e.g.srv.Requester().Stats()
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				// A second long: time to forge answers while it runs.
				res, err := cs.CallTool(testCtx(t, 30*time.Second), &mcp.CallToolParams{Name: "countdown", Arguments: map[string]any{"seconds": 1}})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			var req paho.Message
			select {
			case req = <-spied:
			case <-time.After(10 * time.Second):
				t.Fatal("the spy saw no request for alpha")
			}
			tp, err := contract.ParseTopic(req.Topic())
			if err != nil {
				t.Fatal(err)
			}
			env, err := contract.DecodeEnvelope(req.Payload())
			if err != nil {
				t.Fatal(err)
			}
			// Forged final answers for the open call: under alpha's name
			// (the broker refuses them) and under beta's own (the gateway
			// drops it: the call went to alpha).
			forged := []byte(`{"v":2,"correlationId":"` + env.CorrelationID + `","message":{"jsonrpc":"2.0","id":"` + env.CorrelationID +
				`","result":{"content":[{"type":"text","text":"forged"}]}}}`)
			// The broker may cut a connection that publishes where it may
			// not (the embedded one does): each refused forgery gets its own.
			for i, topic := range []string{tp.Context.ReplyTopic(agAlpha, "alpha-1"), tp.Context.ReplyTopic(agAlpha, contract.AnyInstance)} {
				forger := mqttAgentClient(t, e.broker, agBeta, fmt.Sprintf("beta-forger-%d", i), nil)
				forger.Publish(topic, 1, false, forged).WaitTimeout(5 * time.Second)
			}
			mustToken(t, mallory.Publish(tp.Context.ReplyTopic(agBeta, "beta-mallory"), 1, false, forged))
			poll(t, 10*time.Second, "the answer under beta's name dropped", func() bool {
				return e.g.srv.Requester().Stats().Mismatched > before.Mismatched
			})
			res := <-done
			if res == nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "countdown of 1 finished" {
				t.Fatalf("countdown = %+v: want alpha's own answer", res)
			}

			// Marker: a request to beta-mallory itself, which it may read.
			// Messages from one publisher arrive in order, so once it is
			// here nothing the gateway sent before is still on its way.
			bus := requesterBus(e.g.srv)
			marker := contract.Context{PlatformID: "marker", UserID: "m", SessionID: "m", EntityType: "_", EntityID: "_"}
			if err := bus.Publish(testCtx(t, 5*time.Second), marker.RequestTopic(agBeta, "beta-mallory"), []byte("marker")); err != nil {
				t.Fatal(err)
			}
			for {
				select {
				case m := <-betaIn:
					if string(m.Payload()) == "marker" {
						goto marked
					}
					t.Fatalf("beta received %s: another agent's message", m.Topic())
				case <-time.After(10 * time.Second):
					t.Fatal("no marker")
				}
			}
		marked:
		})
	}
}

// requesterBus is the bus the gateway's requester talks through.
func requesterBus(srv *server.Server) interface {
	Publish(ctx context.Context, topic string, payload []byte) error
} {
	if b := srv.PahoBus(); b != nil {
		return b
	}
	return srv.Broker().Bus()
}

// A token limited to agent alpha never sees or calls another agent's
// tools; the platform tools still follow its scopes.
func TestTokenAgentLimits(t *testing.T) {
	e := startMany(t, false, server.Config{})
	tok := e.g.token(t, store.TokenSpec{UserID: "dana", Agents: []string{agAlpha}})
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			cs := e.g.connect(t, e.g.mcpURL(), tok, version, nil)
			list, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := unionAgentTools(list), []string{"countdown", "echo", "word_count"}; !slices.Equal(got, want) {
				t.Errorf("agent tools %v, want alpha's alone %v", got, want)
			}
			if !slices.ContainsFunc(list.Tools, func(tool *mcp.Tool) bool { return tool.Name == "platform_whoami" }) {
				t.Error("the platform tools went with the agent limit")
			}
			for _, name := range []string{"sha256", "pool.echo", "whoami_instance"} {
				_, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "x"}})
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
					t.Errorf("%s by a token limited to alpha: err = %v, want -32602", name, err)
				}
			}
			res, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "mine"}})
			if err != nil || res.IsError || textOf(t, res) != "mine" {
				t.Errorf("echo = %+v, %v", res, err)
			}
		})
	}
}

// `toolbus agents` shows each agent by name: its instances online of
// those heard of, its tools, then each instance and each tool with its agent.
func TestAgentsCommand(t *testing.T) {
	e := startMany(t, false, server.Config{})
	tok := e.g.token(t, store.TokenSpec{UserID: "ops", Scopes: []string{store.ScopeAdmin, store.ScopeToolsList}})
	out, err := exec.CommandContext(testCtx(t, 30*time.Second), bins.toolbus, "agents", "--server", e.g.base, "--token", tok).CombinedOutput()
	if err != nil {
		t.Fatalf("toolbus agents: %v\n%s", err, out)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] != "AGENT" {
			if _, seen := rows[f[0]]; !seen {
				rows[f[0]] = f // the first row of an agent is its summary
			}
		}
	}
	for agent, want := range map[string][]string{agAlpha: {"true", "1/1", "3"}, agBeta: {"true", "1/1", "2"}, agPool: {"true", "2/2", "2"}} {
		if got := rows[agent]; len(got) < 4 || !slices.Equal(got[1:4], want) {
			t.Errorf("summary of %s: %v, want online, instances, tools %v\n%s", agent, got, want, out)
		}
	}
	if !strings.Contains(string(out), "pool.echo") || !strings.Contains(string(out), "pool-2") {
		t.Errorf("the instance and tool tables lack pool's:\n%s", out)
	}
}

// A pool on a broker without shared subscriptions (its instances listen
// without $share, as expert-agent --exclusive): with
// --address-agent-instances the gateway sends each request to one
// instance, in turn, and each is answered once; without it every instance
// gets every request, and the extra answers are counted as duplicates.
func TestPoolWithoutSharedSubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name       string
		address    bool
		duplicates bool
	}{{"addressed", true, false}, {"to the pool", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, server.Config{AddressAgentInstances: tc.address})
			if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), agPool, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
				t.Fatal(err)
			}
			e := &manyEnv{g: &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}, broker: "tcp://" + srv.MQTTAddr().String()}
			for _, id := range []string{"pool-1", "pool-2"} {
				startPoolInstance(t, e.broker, id, true)
			}
			poll(t, 10*time.Second, "both instances online", func() bool {
				n := 0
				for _, a := range srv.Requester().Agents() {
					if a.Online {
						n++
					}
				}
				return n == 2
			})
			e.waitTools(t, []string{"echo", "whoami_instance"})
			cs := e.g.connect(t, e.g.mcpURL(), e.g.token(t, store.TokenSpec{UserID: "erin"}), "2025-11-25", nil)
			before := srv.Requester().Stats()
			seen := map[string]int{}
			for range 20 {
				res, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "whoami_instance"})
				if err != nil || res.IsError {
					t.Fatalf("whoami_instance: %+v, %v", res, err)
				}
				seen[textOf(t, res)]++
			}
			// A marker call: answers to the calls before it are in by now.
			if _, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "m"}}); err != nil {
				t.Fatal(err)
			}
			dups := srv.Requester().Stats().Duplicates - before.Duplicates
			if tc.duplicates != (dups > 0) {
				t.Errorf("%d duplicate answers, want duplicates %v", dups, tc.duplicates)
			}
			if tc.address && (seen["pool-1"] != 10 || seen["pool-2"] != 10) {
				t.Errorf("answered by %v, want 10 each, in turn", seen)
			}
		})
	}
}

// Agents join and leave while calls run: the union follows (names
// included: a second agent serving sha256 makes both qualified, and the
// first one leaving makes the other plain again), a listening go-sdk
// client hears list_changed each time, and the calls to the agents that
// stay never fail.
func TestAgentsJoinAndLeaveUnderLoad(t *testing.T) {
	e := startMany(t, false, server.Config{})
	tok := e.g.token(t, store.TokenSpec{UserID: "frank"})
	changed := make(chan struct{}, 16)
	e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", &mcp.ClientOptions{ // the watcher
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	gw := e.g.srv.Handler().(*gateway.Gateway)
	poll(t, 10*time.Second, "the watcher's GET stream", func() bool { return gw.ListeningStreams() >= 1 })
	drain := func() {
		for {
			select {
			case <-changed:
			default:
				return
			}
		}
	}
	waitChanged := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no list_changed after %s", what)
		}
	}

	stop := make(chan struct{})
	var calls, failures atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		cs := e.g.connect(t, e.g.mcpURL(), tok, "2025-11-25", nil)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint(i)}})
				calls.Add(1)
				if err != nil || res.IsError {
					failures.Add(1)
				}
			}
		})
	}

	drain()
	startToolsAgent(t, e.broker, "delta", "sha256")
	waitChanged("delta joined")
	e.waitTools(t, []string{"countdown", "delta.sha256", "echo", "pool.echo", "sha256", "time_now", "whoami_instance", "word_count"})

	drain()
	e.stopBeta()
	waitChanged("beta left")
	e.waitTools(t, []string{"countdown", "echo", "pool.echo", "sha256", "whoami_instance", "word_count"})

	close(stop)
	wg.Wait()
	if calls.Load() == 0 || failures.Load() != 0 {
		t.Errorf("%d of %d calls to alpha failed while agents came and went", failures.Load(), calls.Load())
	}
}

// An operator limits a user to agent alpha through the admin API: that
// user's tokens (made before, with no list of their own) list and call
// alpha's tools alone at once; lifting the limit gives every agent back.
func TestUserAgentGrants(t *testing.T) {
	e := startMany(t, false, server.Config{})
	adm, err := admin.NewClient(e.g.base, e.g.token(t, store.TokenSpec{UserID: "ops", Scopes: []string{store.ScopeAdmin}}), admin.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok := e.g.token(t, store.TokenSpec{UserID: "gina"})
	list := func() []string {
		t.Helper()
		cs := e.g.connect(t, e.g.mcpURL(), tok, "2026-07-28", nil)
		defer cs.Close()
		l, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		return unionAgentTools(l)
	}
	if got := list(); !slices.Equal(got, agentTools) {
		t.Fatalf("before any grant: %v", got)
	}
	if _, err := adm.SetUserAgents(testCtx(t, 10*time.Second), "gina", admin.UserAgentsRequest{Agents: []string{agAlpha}}); err != nil {
		t.Fatal(err)
	}
	if got, want := list(), []string{"countdown", "echo", "word_count"}; !slices.Equal(got, want) {
		t.Errorf("gina limited to alpha: %v, want %v", got, want)
	}
	grants, err := adm.ListUserAgents(testCtx(t, 10*time.Second))
	if err != nil || len(grants) != 1 || grants[0].User != "gina" || !slices.Equal(grants[0].Agents, []string{agAlpha}) {
		t.Errorf("grants = %+v, %v", grants, err)
	}
	if _, err := adm.SetUserAgents(testCtx(t, 10*time.Second), "gina", admin.UserAgentsRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.Equal(got, agentTools) {
		t.Errorf("after the limit was lifted: %v", got)
	}
}

// startDocsAgent runs an SDK agent that serves resources and prompts only:
// resources <name>://home, a template <name>://page/{id}, and the prompts
// "summarize" and "<name>_only". Each answer says which agent made it.
func startDocsAgent(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: agentPassword,
		ClientID: name + "-1", Logger: testLogger(t).WithField("component", name)})
	params := func(req *expertagent.MethodRequest) map[string]any {
		var p map[string]any
		_ = json.Unmarshal(req.Params, &p)
		return p
	}
	a.Handle("resources/list", func(context.Context, *expertagent.MethodRequest) (any, error) {
		return map[string]any{"resources": []map[string]string{{"uri": name + "://home", "name": name + " home"}}}, nil
	})
	a.Handle("resources/templates/list", func(context.Context, *expertagent.MethodRequest) (any, error) {
		return map[string]any{"resourceTemplates": []map[string]string{{"uriTemplate": name + "://page/{id}", "name": name + " pages"}}}, nil
	})
	a.Handle("resources/read", func(_ context.Context, req *expertagent.MethodRequest) (any, error) {
		uri, _ := params(req)["uri"].(string)
		return map[string]any{"contents": []map[string]string{{"uri": uri, "text": "read by " + name}}}, nil
	})
	a.Handle("prompts/list", func(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
		for i := range 5 { // log lines from two agents at once share the client's stream
			if err := req.Log(ctx, "info", fmt.Sprintf("%s lists, %d", name, i)); err != nil {
				return nil, err
			}
		}
		return map[string]any{"prompts": []map[string]string{{"name": "summarize"}, {"name": name + "_only"}}}, nil
	})
	a.Handle("completion/complete", func(_ context.Context, req *expertagent.MethodRequest) (any, error) {
		ref, _ := params(req)["ref"].(map[string]any)
		return map[string]any{"completion": map[string]any{"values": []string{name + " completes " + fmt.Sprint(ref["name"], ref["uri"])}}}, nil
	})
	a.Handle("prompts/get", func(_ context.Context, req *expertagent.MethodRequest) (any, error) {
		got, _ := params(req)["name"].(string)
		return map[string]any{"messages": []map[string]any{{"role": "user", "content": map[string]string{"type": "text", "text": name + " got " + got}}}}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("%s: %v", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not ready", name)
	}
}

// Resources and prompts of two agents: listed together, each tagged with
// its agent; a prompt name both hold is <agent>.<prompt> for each; a read
// or a get goes to the agent that listed the URI, template or prompt,
// under its own name there; what nobody listed is -32602.
func TestManyAgentsResourcesAndPrompts(t *testing.T) {
	srv := startServer(t, server.Config{})
	startDocsAgent(t, srv, "docs")
	startDocsAgent(t, srv, "wiki")
	poll(t, 10*time.Second, "both agents online", func() bool {
		return len(srv.Requester().OnlineAgents(context.Background())) == 2
	})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	var logged atomic.Int64
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "hal"}), "2025-11-25", &mcp.ClientOptions{
		LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) { logged.Add(1) },
	})
	ctx := testCtx(t, 20*time.Second)
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}

	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range res.Resources {
		uris = append(uris, r.URI+"@"+fmt.Sprint(r.Meta["io.toolbus/agent"]))
	}
	slices.Sort(uris)
	if want := []string{"docs://home@docs", "wiki://home@wiki"}; !slices.Equal(uris, want) {
		t.Errorf("resources %v, want %v", uris, want)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range prompts.Prompts {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if want := []string{"docs.summarize", "docs_only", "wiki.summarize", "wiki_only"}; !slices.Equal(names, want) {
		t.Errorf("prompts %v, want %v", names, want)
	}
	// The go-sdk client hands notifications to their handler after the
	// response that followed them may have returned: wait for the count.
	poll(t, 5*time.Second, "5 log messages of each agent relayed during prompts/list", func() bool { return logged.Load() >= 10 })
	if n := logged.Load(); n != 10 {
		t.Errorf("%d log messages relayed during prompts/list, want 5 of each agent", n)
	}

	for uri, want := range map[string]string{"docs://home": "read by docs", "wiki://home": "read by wiki", "wiki://page/7": "read by wiki"} {
		r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil || len(r.Contents) != 1 || r.Contents[0].Text != want {
			t.Errorf("read %s: %+v, %v; want %q", uri, r, err, want)
		}
	}
	for name, want := range map[string]string{"wiki.summarize": "wiki got summarize", "docs_only": "docs got docs_only"} {
		p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
		if err != nil || len(p.Messages) != 1 || p.Messages[0].Content.(*mcp.TextContent).Text != want {
			t.Errorf("get %s: %+v, %v; want %q", name, p, err, want)
		}
	}
	for _, tc := range []struct {
		ref  *mcp.CompleteReference
		want string
	}{
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "docs.summarize"}, "docs completes summarize<nil>"},
		{&mcp.CompleteReference{Type: "ref/resource", URI: "wiki://page/{id}"}, "wiki completes <nil>wiki://page/{id}"},
	} {
		c, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: tc.ref, Argument: mcp.CompleteParamsArgument{Name: "id", Value: "1"}})
		if err != nil || len(c.Completion.Values) != 1 || c.Completion.Values[0] != tc.want {
			t.Errorf("complete %+v: %+v, %v; want %q", tc.ref, c, err, tc.want)
		}
	}
	for _, call := range []func() error{
		func() error { _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "other://x"}); return err },
		func() error { _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize"}); return err },
	} {
		var rpcErr *jsonrpc.Error
		if err := call(); !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("what no agent lists: err = %v, want -32602", err)
		}
	}
}
