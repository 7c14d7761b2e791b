package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/requester"
)

// A pool of two instances of one agent: the one that claimed a call is
// killed while the other stays online. Its call fails with ErrAgentGone at
// once, the call nobody claimed keeps waiting (and the survivor answers
// it), and the claim itself never reaches the caller as an interim message.
func TestRequesterClaimedCallFailsWhenItsAgentGoes(t *testing.T) {
	// A claim is any message on the instance's reply topic, which names
	// it: a malformed message there still claims the call (and is
	// dropped).
	claims := map[string]string{
		"claim":             `{"jsonrpc":"2.0","method":"` + contract.ClaimMethod + `"}`,
		"malformed message": `{"jsonrpc":"2.0","method":5}`,
	}
	for _, kind := range []busKind{busInline, busPaho} {
		for name, claimMsg := range claims {
			t.Run(string(kind)+"/"+name, func(t *testing.T) {
				e := rqStartBroker(t)
				doomed := e.raw(t, rqRawOpts{clientID: "worker-a", will: &contract.Presence{Status: contract.StatusOffline, ClientID: "worker-a"}})
				doomed.subscribe(t, contract.SharedRequestFilter(e.AgentUser))
				doomed.announce(t, contract.StatusOnline)
				survivor := e.raw(t, rqRawOpts{clientID: "worker-b"})
				survivor.announce(t, contract.StatusOnline)
				r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: time.Minute})
				ctx := rqContext(t)
				rqPoll(t, "two instances online", func() bool {
					n := 0
					for _, a := range r.Agents() {
						if a.Online {
							n++
						}
					}
					return n == 2 && strings.Join(r.OnlineAgents(ctx), ",") == e.AgentUser
				})

				var interims []string
				interim := func(_ string, m *jsonrpc.Message) { interims = append(interims, m.Method) }
				claimed := rqGo(func() error {
					_, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), interim)
					return err
				})
				q1 := doomed.nextRequest(t)
				unclaimed := rqGo(func() error {
					_, err := r.CallTool(rqContext(t), rqCtx(2), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"y"}`), nil)
					return err
				})
				q2 := doomed.nextRequest(t)

				doomed.reply(t, q1.topic, q1.env.CorrelationID, claimMsg)
				// The claim is in once a later message of the same publisher is
				// (one connection, handled in order): announce again and wait
				// for the requester to hear it. A changed status (a new
				// version) moves the generation; a mere repeat would not.
				gen := r.PresenceGeneration()
				p, _ := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: doomed.clientID, Name: "raw", Version: "1"})
				doomed.publish(t, contract.PresenceTopic(doomed.agent, doomed.clientID), true, p)
				rqPoll(t, "presence re-announced", func() bool { return r.PresenceGeneration() > gen })

				doomed.kill()
				if err := rqRecv(t, claimed); !errors.Is(err, requester.ErrAgentGone) {
					t.Fatalf("claimed call: %v, want ErrAgentGone", err)
				}
				select {
				case err := <-unclaimed:
					t.Fatalf("the unclaimed call ended with %v; it should still wait", err)
				default:
				}
				if got := r.OnlineAgents(ctx); len(got) != 1 || got[0] != e.AgentUser {
					t.Fatalf("OnlineAgents = %v with the survivor online", got)
				}
				survivor.reply(t, q2.topic, q2.env.CorrelationID, rqResult(string(mustUnquote(t, q2.msg.ID)), `{"content":[]}`))
				if err := rqRecv(t, unclaimed); err != nil {
					t.Fatalf("unclaimed call answered by the survivor: %v", err)
				}
				if s := r.Stats(); s.Claims != 2 || s.Mismatched != 0 {
					t.Fatalf("stats %+v: want the two calls claimed, by their own instances", s)
				}
				for _, m := range interims {
					if m == contract.ClaimMethod {
						t.Fatal("the claim reached the caller as an interim message")
					}
				}
			})
		}
	}
}

func mustUnquote(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("id %s: %v", raw, err)
	}
	return s
}

// The Agent SDK claims a call that runs past ClaimAfter (250 ms by
// default); the claim reaches the requester, is counted, and the call still
// ends with its own answer.
func TestAgentClaimsLongCall(t *testing.T) {
	e := rqStartBroker(t)
	release := make(chan struct{})
	slow := expertagent.Tool{
		Tool: mcp.Tool{
			Name:        "slow",
			Description: "Waits until the test lets it go.",
		},
		Handler: func(ctx context.Context, _ *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			select {
			case <-release:
				return mcp.TextResult("done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
	e.startAgent(t, "claimer", slow)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute})
	rqPoll(t, "agent online", func() bool { a := r.Agents(); return len(a) == 1 && a[0].Online })

	var interims []string
	type result struct {
		raw json.RawMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "slow", json.RawMessage(`{}`), func(_ string, m *jsonrpc.Message) {
			interims = append(interims, m.Method)
		})
		done <- result{raw, err}
	}()
	rqPoll(t, "the call claimed", func() bool { return r.Stats().Claims == 1 })
	close(release)
	res := rqRecv(t, done)
	if res.err != nil || rqText(t, res.raw) != "done" {
		t.Fatalf("claimed call: %v %s", res.err, res.raw)
	}
	if len(interims) != 0 {
		t.Fatalf("interim messages %v reached the caller; the claim must not", interims)
	}
}
