package requester_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// TestPresenceRefusedSaysWhy: a broker that refuses the gateway's
// subscription to agent presence (the embedded one, to an expert-agent
// login) fails Start with words that name the login and the role it needs.
func TestPresenceRefusedSaysWhy(t *testing.T) {
	e := rqStartBroker(t)
	bus, err := requester.DialPahoBus(rqContext(t), requester.PahoBusOptions{BrokerURL: e.URL, Username: e.AgentUser, Password: e.AgentPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	r := requester.New(bus, requester.Options{Logger: rqLogger(t, "requester")})
	err = r.Start(rqContext(t))
	if err == nil {
		t.Fatal("Start succeeded without presence")
	}
	if !errors.Is(err, requester.ErrSubscribeRefused) {
		t.Fatalf("Start = %v, want ErrSubscribeRefused", err)
	}
	for _, want := range []string{e.AgentUser, "role platform", "toolbus acl export"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start = %q, want it to say %q", err, want)
		}
	}
}

// TestPresenceSilenceLogged: Mosquitto grants an expert-agent login's
// subscription to agent presence and then delivers none of it (its ACL
// gives that login no read access there). A gateway logged in so finds no
// agent online although one runs: the first call that fails so logs an
// error naming the login and the role it needs; a platform login reaches
// the agent and logs nothing of the kind.
func TestPresenceSilenceLogged(t *testing.T) {
	testenv.MosquittoBinary(t)
	const password = "password-123456"
	st, err := store.Open(rqContext(t), t.TempDir(), store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for name, role := range map[string]acl.Role{"gw": acl.RolePlatform, "search-agent": acl.RoleExpertAgent, "files-agent": acl.RoleExpertAgent} {
		if _, err := st.AddIdentity(rqContext(t), name, role, []byte(password)); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := st.ListIdentities(rqContext(t))
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := st.PasswordHashes(rqContext(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := acl.MosquittoExport(ids, hashes, nil)
	for name, data := range map[string][]byte{"passwords": files.Passwords, "acl": files.ACL, acl.MosquittoConfName: acl.MosquittoConf(dir)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := testenv.StartMosquitto(t, testenv.MosquittoOptions{Dir: dir})
	e := &rqEnv{&testenv.Env{URL: m.URL}}
	e.startAgentAs(t, "search-agent", password, "search")

	for _, tc := range []struct {
		login  string
		silent bool
	}{
		{"gw", false},
		{"files-agent", true},
	} {
		t.Run(tc.login, func(t *testing.T) {
			bus, err := requester.DialPahoBus(rqContext(t), requester.PahoBusOptions{BrokerURL: m.URL, Username: tc.login, Password: password})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bus.Close() })
			logger, hook := logtest.NewNullLogger()
			r := requester.New(bus, requester.Options{Logger: logrus.NewEntry(logger)})
			if err := r.Start(rqContext(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close(rqContext(t)) })
			for range 2 {
				_, err = r.Request(rqContext(t), rqCtx(1), "search-agent", nil, "ping", nil, nil)
			}
			if got := errors.Is(err, requester.ErrNoAgent); got != tc.silent {
				t.Fatalf("Request = %v; ErrNoAgent %t, want %t", err, got, tc.silent)
			}
			var said []string
			for _, entry := range hook.AllEntries() {
				if entry.Level == logrus.ErrorLevel && strings.Contains(entry.Message, "no agent presence has reached") {
					said = append(said, entry.Message)
				}
			}
			switch {
			case !tc.silent && len(said) > 0:
				t.Errorf("logged %q although presence arrived", said)
			case tc.silent && len(said) != 1:
				t.Fatalf("logged %d errors about the silent presence, want 1 (once)", len(said))
			case tc.silent && (!strings.Contains(said[0], tc.login) || !strings.Contains(said[0], "role platform")):
				t.Errorf("logged %q, want it to name %s and the role it needs", said[0], tc.login)
			}
		})
	}
}
