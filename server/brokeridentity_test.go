package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// TestStartChecksBrokerIdentity: a gateway whose broker identity the store
// holds as an expert agent (or disabled) refuses to start, naming the
// identity, its role and the command that makes a platform one, before it
// dials; one the store does not hold is a warning, and Start goes on to
// dial the broker.
func TestStartChecksBrokerIdentity(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), dir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]acl.Role{"search-agent": acl.RoleExpertAgent, "gw": acl.RolePlatform, "gw-old": acl.RolePlatform} {
		if _, err := st.AddIdentity(t.Context(), name, role, []byte("password-123456")); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetDisabled(t.Context(), "gw-old", true); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: a start that gets past the check fails to dial.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name, username string
		refused        []string // in the error; nil: past the check
		warning        string   // logged
	}{
		{name: "expert agent", username: "search-agent", refused: []string{"search-agent has role expert-agent", "toolbus mqtt-user add --username gw --role platform"}},
		{name: "disabled", username: "gw-old", refused: []string{"gw-old is disabled", "toolbus mqtt-user enable --username gw-old"}},
		{name: "platform", username: "gw"},
		{name: "unknown to the store", username: "elsewhere", warning: "the store has no MQTT identity of that name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger, hook := logtest.NewNullLogger()
			srv, err := New(Config{DataDir: dir, HTTPAddr: "127.0.0.1:0", Logger: logrus.NewEntry(logger),
				BrokerURL: "tcp://" + closed, BrokerUsername: tc.username, BrokerPassword: "password-123456",
				BrokerConnectTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			err = srv.Start(ctx)
			if err == nil {
				t.Fatal("Start succeeded with no broker")
			}
			if tc.refused == nil {
				if errors.Is(err, ErrNotPlatformIdentity) {
					t.Fatalf("Start = %v, want it past the identity check", err)
				}
			} else {
				if !errors.Is(err, ErrNotPlatformIdentity) {
					t.Fatalf("Start = %v, want ErrNotPlatformIdentity", err)
				}
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Start = %q, want it to say %q", err, want)
					}
				}
			}
			warned := false
			for _, e := range hook.AllEntries() {
				warned = warned || (e.Level == logrus.WarnLevel && strings.Contains(e.Message, "the store has no MQTT identity"))
			}
			if warned != (tc.warning != "") {
				t.Errorf("warning logged: %t, want %t", warned, tc.warning != "")
			}
		})
	}
}
