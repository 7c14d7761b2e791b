package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/store"
)

// HashIterations is the PBKDF iteration count of the tests' stores: the
// default count is tested in acl, logins elsewhere need not be slow.
const HashIterations = 1000

// BcryptCost is the bcrypt cost of the tests' stores: the least bcrypt
// takes, for the same reason.
const BcryptCost = 4

// setupTimeout bounds opening the store, adding the identities and
// starting (or restarting) the broker.
const setupTimeout = 30 * time.Second

// restartWait bounds how long Restart tries to listen again on the address.
const restartWait = 10 * time.Second

// Env is an embedded broker started by StartBroker, with its store and the
// credentials of its identities. It is named Env, not Broker, so that a
// test type embedding it still reaches the *broker.Broker as .Broker.
type Env struct {
	Store  *store.Store
	Policy *acl.Policy // the Authorizer: no rules, the built-in role policy
	Broker *broker.Broker
	URL    string // tcp://127.0.0.1:port; empty without a TCP listener

	// A platform identity and an expert-agent identity in Store (empty
	// with WithoutIdentities).
	PlatformUser, PlatformPassword string
	AgentUser, AgentPassword       string

	opts  broker.Options // what Restart starts the broker with again
	ready bool
}

// An Option changes how StartBroker sets the broker up.
type Option func(*setup)

type setup struct {
	mods         []func(*broker.Options)
	level        logrus.Level
	noIdentities bool
	waitReady    bool
	iterations   int // 0 = HashIterations
}

// WithHashIterations makes the store hash new passwords with n PBKDF
// iterations instead of HashIterations: a slow KDF on purpose.
func WithHashIterations(n int) Option {
	return func(s *setup) { s.iterations = n }
}

// WithOptions applies mods, in order, to the broker's Options before
// broker.New.
func WithOptions(mods ...func(*broker.Options)) Option {
	return func(s *setup) { s.mods = append(s.mods, mods...) }
}

// WithLogLevel sets the level of the store's and the broker's loggers
// (logrus.DebugLevel by default).
func WithLogLevel(level logrus.Level) Option {
	return func(s *setup) { s.level = level }
}

// WithoutIdentities leaves the store without identities, for tests that
// add their own.
func WithoutIdentities() Option {
	return func(s *setup) { s.noIdentities = true }
}

// WithReadyCheck makes StartBroker and Restart wait until the broker is
// Ready (a TCP connection to it succeeds) before they return.
func WithReadyCheck() Option {
	return func(s *setup) { s.waitReady = true }
}

// StartBroker starts the embedded broker on 127.0.0.1:0 over a fresh
// store.Store in t.TempDir() (HashIterations, logs to the test through
// LoggerAt), with a platform identity "plat1" and an expert-agent identity
// "agent1". t.Cleanup closes the broker (the current one, after a Restart)
// and then the store, after everything the test registers later.
func StartBroker(t testing.TB, opts ...Option) *Env {
	t.Helper()
	s := setup{level: logrus.DebugLevel}
	for _, o := range opts {
		o(&s)
	}
	ctx := Context(t, setupTimeout)
	iterations := HashIterations
	if s.iterations > 0 {
		iterations = s.iterations
	}
	st, err := store.Open(ctx, t.TempDir(), store.StoreOptions{HashIterations: iterations, BcryptCost: BcryptCost, Logger: LoggerAt(t, "store", s.level)})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	e := &Env{Store: st, Policy: acl.NewPolicy(nil), ready: s.waitReady}
	if !s.noIdentities {
		e.PlatformUser, e.PlatformPassword = "plat1", "pw-plat1"
		e.AgentUser, e.AgentPassword = "agent1", "pw-agent1"
		for _, id := range []struct {
			username, password string
			role               acl.Role
		}{{e.PlatformUser, e.PlatformPassword, acl.RolePlatform}, {e.AgentUser, e.AgentPassword, acl.RoleExpertAgent}} {
			if _, err := st.AddIdentity(ctx, id.username, id.role, []byte(id.password)); err != nil {
				t.Fatalf("add identity %s: %v", id.username, err)
			}
		}
	}
	e.opts = broker.Options{
		Addr:          "127.0.0.1:0",
		Authenticator: st,
		Authorizer:    e.Policy,
		Logger:        LoggerAt(t, "broker", s.level),
	}
	for _, m := range s.mods {
		m(&e.opts)
	}
	if err := e.start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	if a := e.Broker.Addr(); a != nil {
		e.URL = "tcp://" + a.String()
		e.opts.Addr = a.String() // a restart listens where the clients reconnect
	}
	return e
}

// start starts a broker with e.opts and makes it e.Broker.
func (e *Env) start(ctx context.Context) error {
	b, err := broker.New(e.opts)
	if err != nil {
		return fmt.Errorf("new broker: %w", err)
	}
	if err := b.Start(ctx); err != nil {
		_ = b.Close()
		return fmt.Errorf("start broker: %w", err)
	}
	if e.ready {
		if err := b.Ready(ctx); err != nil {
			_ = b.Close()
			return fmt.Errorf("broker ready: %w", err)
		}
	}
	e.Broker = b
	return nil
}

// Restart closes the broker and starts a fresh one (no sessions, no
// retained messages) with the same options on the same address: every
// client loses its connection and must reconnect and subscribe again.
func (e *Env) Restart(t testing.TB) {
	t.Helper()
	if err := e.Broker.Close(); err != nil {
		t.Fatalf("close broker: %v", err)
	}
	ctx := Context(t, setupTimeout)
	Poll(t, restartWait, "the broker to listen again on "+e.opts.Addr, func() bool {
		return e.start(ctx) == nil
	})
}
