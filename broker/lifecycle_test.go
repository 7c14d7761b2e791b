package broker_test

import (
	"context"
	"errors"
	"net"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/store"
)

func TestNewValidatesOptions(t *testing.T) {
	policy := acl.NewPolicy(nil)
	var authn broker.Authenticator = authenticatorFunc(nil)
	for _, tc := range []struct {
		name string
		opts broker.Options
	}{
		{"no authenticator", broker.Options{Authorizer: policy}},
		{"no authorizer", broker.Options{Authenticator: authn}},
		{"TLS address without config", broker.Options{Authenticator: authn, Authorizer: policy, TLSAddr: "127.0.0.1:0"}},
		{"inline QoS 3", broker.Options{Authenticator: authn, Authorizer: policy, InlineQoS: 3}},
		{"negative MaxClients", broker.Options{Authenticator: authn, Authorizer: policy, MaxClients: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := broker.New(tc.opts); !errors.Is(err, broker.ErrInvalidOptions) {
				t.Fatalf("New error = %v, want %v", err, broker.ErrInvalidOptions)
			}
		})
	}
}

type authenticatorFunc func(ctx context.Context, username string, password []byte) (acl.Identity, error)

func (f authenticatorFunc) Authenticate(ctx context.Context, username string, password []byte) (acl.Identity, error) {
	return f(ctx, username, password)
}

func TestStartReadyClose(t *testing.T) {
	ctx := testContext(t)
	b, err := broker.New(broker.Options{
		Addr: "127.0.0.1:0",
		Authenticator: authenticatorFunc(func(context.Context, string, []byte) (acl.Identity, error) {
			return acl.Identity{}, store.ErrBadCredentials
		}),
		Authorizer: acl.NewPolicy(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(ctx); !errors.Is(err, broker.ErrNotStarted) {
		t.Fatalf("Ready before Start = %v, want %v", err, broker.ErrNotStarted)
	}
	if b.Addr() != nil {
		t.Fatalf("Addr before Start = %v", b.Addr())
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); !errors.Is(err, broker.ErrStarted) {
		t.Fatalf("second Start = %v, want %v", err, broker.ErrStarted)
	}
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v", err)
	}

	// A port in use fails Start with the address in the error.
	taken, err := broker.New(broker.Options{Addr: b.Addr().String(), Authenticator: authenticatorFunc(nil), Authorizer: acl.NewPolicy(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := taken.Start(ctx); err == nil {
		t.Error("Start on a port in use succeeded")
	}
	if err := taken.Close(); err != nil {
		t.Error(err)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := b.Ready(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Ready after Close = %v, want %v", err, broker.ErrClosed)
	}
	if err := b.Start(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Start after Close = %v, want %v", err, broker.ErrClosed)
	}
	if err := b.Bus().Publish(ctx, "a/b", nil); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Publish after Close = %v, want %v", err, broker.ErrClosed)
	}
	if err := b.Bus().Subscribe(ctx, "a/b", func(string, []byte) {}); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v, want %v", err, broker.ErrClosed)
	}
}

// Without a TCP listener, Ready reports a started broker ready.
func TestReadyWithoutTCP(t *testing.T) {
	ctx := testContext(t)
	b, err := broker.New(broker.Options{Authenticator: authenticatorFunc(nil), Authorizer: acl.NewPolicy(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v", err)
	}
}

// Close disconnects every client, logged in or not, and leaves no goroutine
// of the broker behind.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	// Registered first, so it runs after every other cleanup of the test
	// (clients, broker, store). Goroutines that exist already (the test
	// framework's, other tests' stragglers) are not this test's concern.
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, current) })

	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)

	lost := make(chan struct{}, 2)
	onLost := func(o *paho.ClientOptions) {
		o.SetConnectionLostHandler(func(paho.Client, error) { lost <- struct{}{} })
	}
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil, onLost)
	startResponder(t, agent, sharedRequests, 1)
	gw := e.mustConnect(t, "gw-1", "gw", pwp, nil, onLost)
	mustSubscribe(t, gw, ctxReplies)
	ctx := testContext(t)
	res := make(chan inlineMsg, 1)
	if err := e.Broker.Bus().Subscribe(ctx, ctxReplies, chanHandler(res)); err != nil {
		t.Fatal(err)
	}
	if err := e.Broker.Bus().Publish(ctx, ctxReq, []byte("x")); err != nil {
		t.Fatal(err)
	}
	nextInline(t, res)

	// A connection that never logs in must not hold Close up.
	silent, err := net.Dial("tcp", e.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	if err := e.Broker.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-lost:
		case <-timeAfter():
			t.Fatal("a client was not disconnected by Close")
		}
	}
	if n := e.Broker.ClientCount(); n != 0 {
		t.Errorf("ClientCount after Close = %d", n)
	}
}
