package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

// TestRunServesOverBroker runs the command against the embedded broker and
// calls its tools the way the gateway does, over the broker's inline bus.
func TestRunServesOverBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, t.TempDir(), store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.AddIdentity(ctx, "ref-agent", acl.RoleExpertAgent, []byte("pw")); err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Addr: "127.0.0.1:0", Authenticator: st, Authorizer: acl.NewPolicy(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	const clientID = "ref-agent-1"
	online := make(chan struct{}, 4)
	if err := b.Bus().Subscribe(ctx, contract.PresenceFilter, func(topic string, p []byte) {
		var pr contract.Presence
		if json.Unmarshal(p, &pr) == nil && pr.Status == contract.StatusOnline && pr.Name == "reference" &&
			topic == contract.PresenceTopic("ref-agent", clientID) {
			online <- struct{}{}
		}
	}); err != nil {
		t.Fatal(err)
	}
	c := contract.Context{PlatformID: "p", UserID: "u", SessionID: "s", EntityType: "_", EntityID: "_"}
	replies := make(chan contract.Envelope, 16)
	if err := b.Bus().Subscribe(ctx, c.ReplyFilter(), func(topic string, p []byte) {
		if topic != c.ReplyTopic("ref-agent", clientID) {
			t.Errorf("reply on %s, want the instance's own reply topic", topic)
			return
		}
		if env, err := contract.DecodeEnvelope(p); err == nil {
			replies <- env
		}
	}); err != nil {
		t.Fatal(err)
	}
	request := c.RequestTopic("ref-agent", contract.AnyInstance)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	env := map[string]string{"TOOLBUS_AGENT_PASSWORD": "pw"}
	go func() {
		done <- run(runCtx, []string{"--broker-url", "tcp://" + b.Addr().String(), "--username", "ref-agent", "--client-id", clientID,
			"--name", "reference", "--log-level", "error", "--tools", "sha256,echo"},
			func(k string) string { return env[k] }, io.Discard)
	}()
	select {
	case <-online:
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	case <-ctx.Done():
		t.Fatal("agent never came online")
	}

	tests := []struct{ name, params, want string }{
		{"echo", `{"name":"echo","arguments":{"text":"hello"}}`, `{"content":[{"type":"text","text":"hello"}]}`},
		{"sha256", `{"name":"sha256","arguments":{"text":"abc"}}`,
			`{"content":[{"type":"text","text":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}],` +
				`"structuredContent":{"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}`},
		{"bad arguments", `{"name":"echo","arguments":{}}`,
			`{"content":[{"type":"text","text":"invalid arguments: field \"text\" is required"}],"isError":true}`},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "r-" + string(rune('a'+i))
			req := contract.Envelope{CorrelationID: id,
				Message: json.RawMessage(`{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":` + tc.params + `}`)}
			payload, _ := req.Encode()
			if err := b.Bus().Publish(ctx, request, payload); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-replies:
				want := `{"jsonrpc":"2.0","id":"` + id + `","result":` + tc.want + `}`
				if got.CorrelationID != id || string(got.Message) != want {
					t.Fatalf("reply %s %s, want %s", got.CorrelationID, got.Message, want)
				}
			case <-ctx.Done():
				t.Fatal("no reply")
			}
		})
	}
	// --tools: the agent lists (and serves) only the tools it names.
	req := contract.Envelope{CorrelationID: "list", Message: json.RawMessage(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)}
	payload, _ := req.Encode()
	if err := b.Bus().Publish(ctx, request, payload); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-replies:
		var m struct {
			Result struct {
				Tools []struct{ Name string }
			}
		}
		if err := json.Unmarshal(got.Message, &m); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range m.Result.Tools {
			names = append(names, tool.Name)
		}
		if strings.Join(names, ",") != "echo,sha256" {
			t.Errorf("tools/list with --tools sha256,echo: %v", names)
		}
	case <-ctx.Done():
		t.Fatal("no tools/list reply")
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil after cancel", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after cancel")
	}
}
