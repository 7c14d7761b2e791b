package bridge

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/expertagent"
)

// An upstream that does not answer initialize within InitTimeout (a first
// "npx -y" still downloading the server) fails with ErrInitTimeout, in
// words that name the flag to raise.
func TestInitTimeoutNamesTheFlag(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	b, err := New(Options{Command: []string{sleep, "60"}, Agent: expertagent.AgentOptions{Username: "slow", BrokerURL: "tcp://" + closedPort(t)},
		InitTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := newLifetime(b)
	err = l.connect(t.Context())
	l.wait()
	if !errors.Is(err, ErrInitTimeout) {
		t.Fatalf("connect = %v, want ErrInitTimeout", err)
	}
	for _, want := range []string{"--init-timeout", "npx -y", "300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("connect's error %q does not say %q", err, want)
		}
	}
}
