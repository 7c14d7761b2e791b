package integration

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/server"
)

// TestClaimedCallFailsWhenItsWorkerDies: two reference agents (real
// processes) logged in as one identity, worker: two instances of one
// agent. The one running a long call claims it; killed with SIGKILL while
// the other stays online, its call fails at once with ErrAgentGone instead
// of waiting for the 60 s deadline, and the survivor serves the next call.
func TestClaimedCallFailsWhenItsWorkerDies(t *testing.T) {
	srv := startServer(t, server.Config{CallTimeout: time.Minute})
	const password = "worker-password-123"
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), "worker", acl.RoleExpertAgent, []byte(password)); err != nil {
		t.Fatal(err)
	}
	a := startAgentProc(t, srv, "worker", password, "worker-a")
	r := srv.Requester()
	c := ctxFor(srv, "alice", "s1")

	errc := make(chan error, 1)
	go func() {
		_, err := r.CallTool(testCtx(t, 2*time.Minute), c, "worker", nil, "countdown", json.RawMessage(`{"seconds":50}`), nil)
		errc <- err
	}()
	poll(t, 15*time.Second, "the call claimed by worker-a", func() bool { return r.Stats().Claims == 1 })
	startAgentProc(t, srv, "worker", password, "worker-b")

	_ = a.cmd.Process.Kill()
	select {
	case err := <-errc:
		if !errors.Is(err, requester.ErrAgentGone) {
			t.Fatalf("the claimed call ended with %v, want ErrAgentGone", err)
		}
	case <-time.After(30 * time.Second): // the deadline is 60 s: this is "at once"
		t.Fatal("the claimed call still waits 30 s after its worker died")
	}
	res, err := r.CallTool(testCtx(t, 20*time.Second), ctxFor(srv, "alice", "s2"), "worker", nil, "echo", json.RawMessage(`{"text":"still here"}`), nil)
	if err != nil || decodeResult(t, res).Content[0].Text != "still here" {
		t.Fatalf("call after the death: %v %s", err, res)
	}
}
