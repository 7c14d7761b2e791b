package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The tiny runs of the harness's gateway modes (tools/list, cold contexts,
// spread contexts, large payloads, the raw MQTT floor) against a real
// toolbus in this process: gateway, embedded broker, an expert agent over
// TCP. They keep the modes from rotting; nothing here asserts on timing.

const (
	benchAgentUser  = "bench-agent"
	benchFloorUser  = "bench-floor"
	benchPassword   = "bench-password-123"
	benchExtraTools = 30
)

// benchGateway is a running toolbus with an expert agent serving echo and
// benchExtraTools trivial tools.
type benchGateway struct {
	srv   *server.Server
	url   string // the MCP endpoint
	token string
	mqtt  string // tcp://host:port of the embedded broker
}

func startBenchGateway(t testing.TB) *benchGateway {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	srv := servertest.Start(t, server.Config{MaxBodyBytes: 4 << 20,
		Logger: testenv.LoggerAt(t, "toolbus", logrus.WarnLevel)})
	for user, role := range map[string]acl.Role{benchAgentUser: acl.RoleExpertAgent, benchFloorUser: acl.RolePlatform} {
		if _, err := srv.Store().AddIdentity(ctx, user, role, []byte(benchPassword)); err != nil {
			t.Fatal(err)
		}
	}
	secret := servertest.Token(t, srv, store.TokenSpec{UserID: "bench"})
	g := &benchGateway{srv: srv, url: "http://" + srv.HTTPAddr().String() + "/api/v1/mcp", token: secret,
		mqtt: "tcp://" + srv.MQTTAddr().String()}
	startBenchAgent(t, g)
	return g
}

// startBenchAgent runs the expert agent until the test ends and waits until
// the gateway sees it.
func startBenchAgent(t testing.TB, g *benchGateway) {
	t.Helper()
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: g.mqtt, Username: benchAgentUser, Password: benchPassword, ClientID: "bench-agent-1",
		Logger: testenv.LoggerAt(t, "agent", logrus.WarnLevel),
	})
	echo := func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
		var a struct {
			Text string `json:"text"`
		}
		if err := req.Bind(&a); err != nil {
			return nil, err
		}
		return mcp.TextResult(a.Text), nil
	}
	tools := []expertagent.Tool{{
		Tool: mcp.Tool{
			Name:        EchoTool,
			Description: "Returns its text.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		},
		Handler: echo,
	}}
	for i := 1; i <= benchExtraTools; i++ {
		tools = append(tools, expertagent.Tool{Tool: mcp.Tool{Name: fmt.Sprintf("tool_%04d", i), Description: "Extra."}, Handler: echo})
	}
	for _, tool := range tools {
		if err := a.AddTool(tool); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("agent not ready")
	}
	testenv.Poll(t, 10*time.Second, "agent online", func() bool {
		for _, ag := range g.srv.Requester().Agents() {
			if ag.ClientID == "bench-agent-1" && ag.Online {
				return true
			}
		}
		return false
	})
}

func (g *benchGateway) load(calls int) LoadOptions {
	return LoadOptions{URL: g.url, Token: g.token, Sessions: 2, Concurrency: 4, Calls: calls, CallTimeout: 10 * time.Second}
}

func TestGatewayModesTiny(t *testing.T) {
	g := startBenchGateway(t)
	for _, version := range []string{ProtocolLegacy, ProtocolModern} {
		t.Run("tools/list@"+version, func(t *testing.T) {
			lo := g.load(40)
			lo.ProtocolVersion, lo.Method, lo.MinTools = version, MethodToolsList, benchExtraTools+1
			r, err := Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, r, 40)
			if r.Method != MethodToolsList || r.Tool != "" {
				t.Errorf("method %q tool %q", r.Method, r.Tool)
			}
			lo.MinTools = 10000 // more than the agent has: every call fails, none passes silently
			lo.Calls = 5
			r, err = Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK != 0 || r.ErrorKinds["wrong_result"] != 5 {
				t.Errorf("too short a list passed: ok %d, kinds %v", r.OK, r.ErrorKinds)
			}
		})
		t.Run("cold@"+version, func(t *testing.T) {
			lo := g.load(20)
			lo.ProtocolVersion, lo.Cold = version, true
			lo.Warmup = 50 * time.Millisecond
			r, err := Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, r, 20)
			if !r.Cold {
				t.Error("result does not say cold")
			}
			if legacy := version == ProtocolLegacy; legacy != (r.ColdCycle != nil) {
				t.Errorf("cold cycle %+v on %s", r.ColdCycle, version)
			} else if legacy && r.ColdCycle.P50 < r.Latency.P50/2 {
				// A cycle holds the call: its median cannot be far below the call's.
				t.Errorf("cold cycle p50 %.3f ms, call p50 %.3f ms", r.ColdCycle.P50, r.Latency.P50)
			}
		})
		t.Run("contexts@"+version, func(t *testing.T) {
			before := len(g.srv.Requester().Contexts(""))
			lo := g.load(60)
			lo.ProtocolVersion, lo.Contexts = version, 30
			lo.ServerPIDs = []int{os.Getpid()}
			r, err := Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, r, 60)
			if got := len(g.srv.Requester().Contexts("")) - before; got < 30 {
				t.Errorf("%d new contexts held, want at least 30", got)
			}
			if runtime.GOOS == "linux" && (r.Memory == nil || r.Memory.Contexts != 30 || r.Memory.RSSAfterBytes <= 0 || len(r.Memory.Processes) != 1) {
				t.Errorf("memory = %+v", r.Memory)
			}
		})
	}
	t.Run("payload 1 MiB", func(t *testing.T) {
		lo := g.load(4)
		lo.PayloadBytes = 1 << 20
		for _, client := range []string{ClientRaw, ClientNetHTTP} {
			lo.Client = client
			r, err := Run(testContext(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, r, 4)
		}
	})
	t.Run("mqtt floor", func(t *testing.T) {
		for _, client := range []string{"", "raw", "paho"} {
			for _, qos0 := range []bool{false, true} {
				r, err := RunMQTTFloor(testContext(t), MQTTFloorOptions{
					BrokerURL: g.mqtt, Username: benchFloorUser, Password: benchPassword, QoS0: qos0, Client: client,
					Load: LoadOptions{Sessions: 2, Concurrency: 4, Calls: 200, PayloadBytes: 64, ServerPIDs: []int{os.Getpid()}},
				})
				if err != nil {
					t.Fatal(err)
				}
				checkWellFormed(t, r, 200)
				want := cmp.Or(client, "raw")
				if r.Scenario != MQTTFloorScenario || r.Client != want || r.FullChecks < 1 || r.FullChecks > 200 {
					t.Errorf("%s: scenario %q client %q, %d full checks", want, r.Scenario, r.Client, r.FullChecks)
				}
			}
			_, err := RunMQTTFloor(testContext(t), MQTTFloorOptions{BrokerURL: g.mqtt, Username: benchFloorUser, Password: "wrong",
				Client: client, Load: LoadOptions{Calls: 1, CallTimeout: 5 * time.Second}})
			if err == nil || !strings.Contains(err.Error(), ErrSetup.Error()) {
				t.Errorf("%s: bad password: err = %v, want ErrSetup", client, err)
			}
		}
		// A response topic of another platform identity's tree is refused.
		_, err := RunMQTTFloor(testContext(t), MQTTFloorOptions{BrokerURL: g.mqtt, Username: benchFloorUser, Password: benchPassword,
			Load: LoadOptions{Calls: 1, CallTimeout: 5 * time.Second}, PlatformID: "a/b"})
		if err == nil || !strings.Contains(err.Error(), ErrSetup.Error()) {
			t.Errorf("bad topic: err = %v, want ErrSetup", err)
		}
		if _, err := RunMQTTFloor(testContext(t), MQTTFloorOptions{BrokerURL: g.mqtt, Client: "mosquitto_pub"}); err == nil {
			t.Error("unknown client accepted")
		}
	})
}

// TestGatewaySuiteChartMerge runs a suite the way scripts/bench.sh runs a
// phase (target scenarios, a cold variant, the MQTT floor), then draws the
// chart and merges the JSON reports back.
func TestGatewaySuiteChartMerge(t *testing.T) {
	g := startBenchGateway(t)
	dir := t.TempDir()
	scenarios := []Scenario{
		{Name: "agent echo", URL: g.url, Token: g.token, Tool: EchoTool},
		{Name: "agent echo cold", URL: g.url, Token: g.token, Tool: EchoTool, Cold: true},
		{MQTTFloor: &MQTTFloorOptions{BrokerURL: g.mqtt, Username: benchFloorUser, Password: benchPassword}},
	}
	rep, err := RunSuite(testContext(t), SuiteOptions{
		Scenarios: scenarios, Load: LoadOptions{Sessions: 2, Calls: 30},
		Baseline: "agent echo", Title: "cold <contexts> & floor", Notes: []string{"a note"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() || len(rep.Summary) != 3 {
		t.Fatalf("report: %+v", rep.Results)
	}
	if r := rep.Summary[1]; r.Ratios == nil || r.Ratios.Baseline != "agent echo" || r.ColdCycle == nil {
		t.Errorf("cold row: ratios %+v, cycle %+v", r.Ratios, r.ColdCycle)
	}
	if rep.Summary[2].Scenario != MQTTFloorScenario {
		t.Errorf("floor row named %q", rep.Summary[2].Scenario)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== cold <contexts> & floor", "agent echo cold", MQTTFloorScenario, "whole cold cycle", "note: a note", "p50 x"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	for i, phase := range []string{"01-a", "02-b"} {
		p, err := rep.WriteJSON(filepath.Join(dir, phase))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := WriteSVGFile(strings.TrimSuffix(p, ".json")+".svg", []*Report{rep}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reps, err := ReadReports(dir)
	if err != nil || len(reps) != 2 {
		t.Fatalf("ReadReports: %d reports, %v", len(reps), err)
	}
	col := NewCollection("make bench", reps)
	j, svgPath, err := col.WriteFiles(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	var back Collection
	data, err := os.ReadFile(j)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &back); err != nil || len(back.Reports) != 2 || back.Command != "make bench" || back.Reports[0].Title != rep.Title {
		t.Errorf("merged JSON: %v\n%.300s", err, data)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(svg)
	if !strings.HasPrefix(s, "<svg") || !strings.HasSuffix(strings.TrimSpace(s), "</svg>") ||
		!strings.Contains(s, "cold &lt;contexts&gt; &amp; floor") || !strings.Contains(s, "(baseline)") || strings.Count(s, "<rect") < 7 {
		t.Errorf("chart:\n%s", s)
	}
	if _, err := ReadReports(t.TempDir()); err == nil {
		t.Error("ReadReports of an empty directory succeeded")
	}
}
