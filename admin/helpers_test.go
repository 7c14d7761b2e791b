package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// env is a running toolbus (embedded broker) with an admin token and a
// token without the admin scope.
type env struct {
	srv         *server.Server
	base        string // http://127.0.0.1:port
	adminSecret string
	userSecret  string
	adm         *admin.Client
}

func startEnv(t *testing.T) *env {
	t.Helper()
	srv := servertest.Start(t, server.Config{ListTimeout: 5 * time.Second})
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	e.adminSecret = mintToken(t, srv, store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin, store.ScopeToolsList}})
	e.userSecret = mintToken(t, srv, store.TokenSpec{UserID: "alice"})
	var err error
	if e.adm, err = admin.NewClient(e.base, e.adminSecret, admin.ClientOptions{Timeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return e
}

func mintToken(t *testing.T, srv *server.Server, spec store.TokenSpec) string {
	t.Helper()
	return servertest.Token(t, srv, spec)
}

// ctx is a context for one call of a test.
func ctx(t *testing.T) context.Context { return testenv.Context(t, 20*time.Second) }

// mqttConn is a paho client that reports a lost connection.
type mqttConn struct {
	c    paho.Client
	lost chan error
}

// connectMQTT logs in to srv's broker without auto-reconnect.
func connectMQTT(t *testing.T, srv *server.Server, username, password, clientID string) (*mqttConn, error) {
	t.Helper()
	m := &mqttConn{lost: make(chan error, 1)}
	o := paho.NewClientOptions().AddBroker("tcp://" + srv.MQTTAddr().String()).
		SetClientID(clientID).SetUsername(username).SetPassword(password).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case m.lost <- err:
			default:
			}
		})
	m.c = paho.NewClient(o)
	tok := m.c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, errors.New("connect: no answer in 10s")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { m.c.Disconnect(0) })
	return m, nil
}

// startAgent runs an expert agent with an echo tool on srv's broker and
// waits until the gateway sees it online.
func startAgent(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	const pw = "agent-password-123"
	if _, err := srv.Store().AddIdentity(ctx(t), name, acl.RoleExpertAgent, []byte(pw)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: pw,
		ClientID: name + "-1", Name: name, Logger: testenv.Logger(t, "agent"),
	})
	if err := a.AddTool(expertagent.Tool{
		Tool: mcp.Tool{
			Name:        "echo",
			Description: "Returns its text.",
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			return mcp.TextResult("echo"), nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
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
		for _, s := range srv.Requester().Agents() {
			if s.ClientID == name+"-1" && s.Online {
				return true
			}
		}
		return false
	})
}
