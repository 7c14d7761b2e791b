package broker_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/internal/testenv"
)

// refusals collects the reasons of the refused logins the broker reports.
type refusals struct {
	mu      sync.Mutex
	reasons []string
}

func (r *refusals) event(ev broker.Event) {
	if ev.Kind == broker.EventLoginRefused {
		r.mu.Lock()
		r.reasons = append(r.reasons, ev.Username+": "+ev.Err.Error())
		r.mu.Unlock()
	}
}

func (r *refusals) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reasons) == 0 {
		return ""
	}
	return r.reasons[len(r.reasons)-1]
}

// After MaxFailedLogins wrong passwords, a username's next login is
// refused without the KDF, even with the right password; other usernames
// still log in, and a client whose login the cache knows is never held
// back.
func TestFailedLoginsThrottled(t *testing.T) {
	seen := &refusals{}
	e := newEnv(t, func(o *broker.Options) {
		o.MaxFailedLogins, o.FailedLoginRefill = 3, time.Hour
		o.Events = seen.event
	})
	pw1 := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pw2 := e.addIdentity(t, "agent2", acl.RoleExpertAgent)
	pw3 := e.addIdentity(t, "agent3", acl.RoleExpertAgent)
	e.mustConnect(t, "agent3-a", "agent3", pw3, nil) // agent3's login is in the cache now

	for _, user := range []string{"agent1", "agent3"} {
		for i := range 3 {
			if c, err := e.connect(t, fmt.Sprintf("%s-bad%d", user, i), user, "wrong-password", nil); err == nil {
				c.Disconnect(0)
				t.Fatalf("%s logged in with a wrong password", user)
			}
			if got, want := seen.last(), user+": bad credentials"; got != want {
				t.Fatalf("refusal %q, want %q", got, want)
			}
		}
	}
	if c, err := e.connect(t, "agent1-b", "agent1", pw1, nil); err == nil {
		c.Disconnect(0)
		t.Error("agent1 logged in after 3 failed logins in a row")
	} else if got, want := seen.last(), "agent1: too many failed logins"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	e.mustConnect(t, "agent2-a", "agent2", pw2, nil) // another username, same source: 6 of 9 spent
	e.mustConnect(t, "agent3-b", "agent3", pw3, nil) // the cache knows it
}

// A client whose login the cache knows logs in while slow password
// guesses hold every KDF slot: it does not queue behind them.
func TestCachedLoginSkipsTheQueue(t *testing.T) {
	// A deliberately slow KDF: each guess holds its slot for a long while.
	e := &testEnv{testenv.StartBroker(t, testenv.WithoutIdentities(), testenv.WithHashIterations(300_000),
		testenv.WithLogLevel(logrus.InfoLevel), testenv.WithOptions(func(o *broker.Options) { o.ConnectTimeout = time.Minute }))}
	pw := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	e.mustConnect(t, "agent1-a", "agent1", pw, nil) // pays the KDF once; cached from now on

	var guessed atomic.Int64
	var wg sync.WaitGroup
	base := e.Store.KDFRuns()
	procs := runtime.GOMAXPROCS(0)
	for i := range 2*procs + 2 { // more guesses than the broker lets authenticate at once
		wg.Go(func() {
			if c, err := e.connect(t, fmt.Sprintf("guess-%d", i), "agent1", fmt.Sprintf("guess-%d", i), nil); err == nil {
				c.Disconnect(0)
			}
			guessed.Add(1)
		})
	}
	t.Cleanup(wg.Wait)
	testenv.Poll(t, waitFor, "the guesses in the KDF", func() bool { return e.Store.KDFRuns() >= base+int64(procs) })
	e.mustConnect(t, "agent1-b", "agent1", pw, nil)
	if n := guessed.Load(); n > 0 {
		t.Errorf("the cached login came back after %d guesses: it waited behind them", n)
	}
}
