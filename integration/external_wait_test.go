package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
)

// A gateway started before its external broker keeps trying, logging each
// failure, instead of exiting; meanwhile it answers /healthz, and 503 to
// /readyz and the MCP endpoint; it serves once the broker is up.
func TestServeWaitsForItsBroker(t *testing.T) {
	addr, httpAddr := freeAddr(t), freeAddr(t)
	log := testLogger(t)
	msgs := &logMessages{}
	log.Logger.AddHook(msgs)
	srv, err := server.New(server.Config{DataDir: t.TempDir(), HTTPAddr: httpAddr, HashIterations: testenv.HashIterations,
		Logger: log, BrokerURL: "tcp://" + addr, BrokerUsername: "plat1", BrokerPassword: "pw-plat1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()
	poll(t, 10*time.Second, "a failed first connection logged", func() bool {
		return msgs.has("cannot connect to the external broker; trying again")
	})
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable, "/api/v1/mcp": http.StatusServiceUnavailable} {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatalf("%s while waiting for the broker: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s while waiting for the broker = %d, want %d", path, resp.StatusCode, want)
		}
		if want == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", path)
		}
	}

	// The broker comes up where the gateway looks (testenv's platform
	// identity is plat1).
	testenv.StartBroker(t, testenv.WithOptions(func(o *broker.Options) { o.Addr = addr }))
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start = %v once the broker was up", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not start once its broker was up")
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	resp, err := http.Get("http://" + srv.HTTPAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d once the broker is up", resp.StatusCode)
	}
}
