// Package servertest starts an in-process toolbus (server.Server with its
// embedded broker) for tests of the packages built on it. It is apart from
// testenv, which the server's own dependencies' tests import.
package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// Start starts a toolbus with cfg on free loopback ports and shuts it down
// when the test ends. Left zero, DataDir is a fresh temporary directory,
// HashIterations the tests' cheap setting and Logger the test log.
func Start(t testing.TB, cfg server.Config) *server.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.HTTPAddr, cfg.MQTTAddr = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.HashIterations == 0 {
		cfg.HashIterations = testenv.HashIterations
		cfg.BcryptCost = testenv.BcryptCost
	}
	if cfg.Logger == nil {
		cfg.Logger = testenv.Logger(t, "")
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return srv
}

// Token mints a personal access token in srv's store and returns its
// secret.
func Token(t testing.TB, srv *server.Server, spec store.TokenSpec) string {
	t.Helper()
	secret, _, err := srv.Store().CreateToken(testenv.Context(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}
