package requester_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
)

// TestPahoBusLoginRefused: a login the broker refuses is ErrLoginRefused,
// with paho's error, in words that say what to check, as the agent side's
// refusals are.
func TestPahoBusLoginRefused(t *testing.T) {
	env := testenv.StartBroker(t)
	if err := env.Store.SetDisabled(t.Context(), env.AgentUser, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, username, password string
		cause                    error
		words                    string
	}{
		{"wrong password", env.PlatformUser, "not-the-password", packets.ErrorRefusedBadUsernameOrPassword, "check --broker-username and --broker-password"},
		{"unknown identity", "nobody-here", "whatever-pw", packets.ErrorRefusedBadUsernameOrPassword, "toolbus mqtt-user list"},
		{"disabled identity", env.AgentUser, env.AgentPassword, nil, "toolbus acl export"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: env.URL, Username: tc.username, Password: tc.password})
			if err == nil {
				_ = bus.Close()
				t.Fatal("DialPahoBus succeeded")
			}
			if !errors.Is(err, requester.ErrLoginRefused) {
				t.Fatalf("DialPahoBus = %v, want ErrLoginRefused", err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("DialPahoBus = %v, want it to wrap %v", err, tc.cause)
			}
			if !strings.Contains(err.Error(), tc.words) || !strings.Contains(err.Error(), tc.username) {
				t.Errorf("DialPahoBus = %q, want it to name %s and say %q", err, tc.username, tc.words)
			}
		})
	}
}
