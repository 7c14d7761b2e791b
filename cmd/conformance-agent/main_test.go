package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/conformance"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/requester"
)

const testKey = "0123456789abcdef0123456789abcdef" // 32 bytes

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			if c.Opts.BrokerURL != "tcp://127.0.0.1:1883" || c.Opts.Name != "conformance" {
				t.Errorf("opts = %+v", c.Opts)
			}
			if c.fixture.StateKey != nil || c.fixture.StateTTL != conformance.DefaultStateTTL {
				t.Errorf("fixture = %+v", c.fixture)
			}
		}},
		{name: "flags", args: []string{"--state-key", testKey, "--state-ttl", "1m"},
			check: func(t *testing.T, c config) {
				if string(c.fixture.StateKey) != testKey || c.fixture.StateTTL != time.Minute {
					t.Errorf("fixture = %+v", c.fixture)
				}
			}},
		{name: "state key from the environment", env: map[string]string{"TOOLBUS_AGENT_STATE_KEY": testKey},
			check: func(t *testing.T, c config) {
				if string(c.fixture.StateKey) != testKey {
					t.Errorf("fixture = %+v", c.fixture)
				}
			}},
		{name: "short state key", args: []string{"--state-key", "short"}, wantErr: "--state-key"},
		{name: "zero state ttl", args: []string{"--state-ttl", "0s"}, wantErr: "--state-ttl"},
		{name: "common flag checked (internal/agentcli)", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// --username is required (the agent's name on the bus).
			args := append([]string{"--username", "conformance"}, tc.args...)
			c, err := parseFlags(args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestRunHelp(t *testing.T) {
	err := run(t.Context(), []string{"--help"}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
}

func TestRunFailsWithoutBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := run(ctx, []string{"--broker-url", "tcp://127.0.0.1:1", "--username", "conformance", "--log-level", "error", "--connect-timeout", "1ms"}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, expertagent.ErrAgentConnect) {
		t.Fatalf("run = %v, want ErrAgentConnect", err)
	}
}

// TestRunServesOverBroker runs the command against the embedded broker,
// calls it the way the gateway does, and checks that a requestState one
// process sealed is accepted by another with the same --state-key (as
// instances of one group need) and refused by one with another key.
func TestRunServesOverBroker(t *testing.T) {
	env := testenv.StartBroker(t, testenv.WithLogLevel(logrus.WarnLevel))
	ctx := testenv.Context(t, 60*time.Second)
	r := requester.New(env.Broker.Bus(), requester.Options{CallTimeout: 10 * time.Second})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	c := contract.Context{PlatformID: "gw", UserID: "u", SessionID: "s", EntityType: "_", EntityID: "_"}
	caller := &contract.Caller{UserID: "u"}
	call := func(t *testing.T, method, params string) *jsonrpc.Message {
		t.Helper()
		m, err := r.Request(ctx, c, env.AgentUser, caller, method, json.RawMessage(params), nil)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return m
	}

	start := func(t *testing.T, key string) (stop func()) {
		t.Helper()
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		vars := map[string]string{"TOOLBUS_AGENT_PASSWORD": env.AgentPassword, "TOOLBUS_AGENT_STATE_KEY": key}
		go func() {
			done <- run(runCtx, []string{"--broker-url", env.URL, "--username", env.AgentUser, "--log-level", "error"},
				func(k string) string { return vars[k] }, io.Discard)
		}()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run = %v, want nil after cancel", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("run did not return after cancel")
			}
		}
		t.Cleanup(stop)
		testenv.Poll(t, 10*time.Second, "the agent to answer", func() bool {
			m, err := r.Request(ctx, c, env.AgentUser, caller, "ping", json.RawMessage(`{}`), nil)
			return err == nil && m.Error == nil
		})
		return stop
	}

	stop := start(t, testKey)
	if got := string(call(t, "tools/call", `{"name":"test_simple_text"}`).Result); got != `{"content":[{"type":"text","text":"This is a simple text response for testing."}]}` {
		t.Fatalf("test_simple_text = %s", got)
	}
	first := call(t, "tools/call", `{"name":"test_input_required_result_request_state","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}`)
	var ir struct {
		ResultType   string `json:"resultType"`
		RequestState string `json:"requestState"`
	}
	if err := json.Unmarshal(first.Result, &ir); err != nil || ir.ResultType != "input_required" || ir.RequestState == "" {
		t.Fatalf("round 1 = %s (%v)", first.Result, err)
	}
	stop()

	retry, _ := json.Marshal(map[string]any{
		"name":           "test_input_required_result_request_state",
		"_meta":          map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{}}},
		"inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"ok": true}}},
		"requestState":   ir.RequestState,
	})
	stop = start(t, testKey)
	if m := call(t, "tools/call", string(retry)); m.Error != nil || !strings.Contains(string(m.Result), "state-ok") {
		t.Fatalf("round 2 on a process with the same key = %s %v", m.Result, m.Error)
	}
	stop()

	start(t, strings.Repeat("x", 32))
	if m := call(t, "tools/call", string(retry)); m.Error == nil || m.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("round 2 on a process with another key = %s %v, want -32602", m.Result, m.Error)
	}
}
