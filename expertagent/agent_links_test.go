package expertagent_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
)

// TestAgentLinks: the agent serves a call with a large payload over every
// kind of connection: tcp://, ssl:// / tls:// and ws://. A certificate the
// agent does not trust fails Run with ErrAgentConnect.
func TestAgentLinks(t *testing.T) {
	cert, pool := testenv.SelfSignedCert(t)
	e := &agEnv{testenv.StartBroker(t, testenv.WithReadyCheck(), testenv.WithOptions(func(o *broker.Options) {
		o.InlineQoS = 1
		o.TLSAddr = "127.0.0.1:0"
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		o.WSAddr = "127.0.0.1:0"
	}))}
	trust := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tlsAddr := e.Broker.TLSAddr().String()
	big := strings.Repeat("0123456789abcdef", 200<<10/16) // several TLS records and WebSocket frames
	for _, tc := range []struct {
		name, url string
		tls       *tls.Config
	}{
		{name: "tcp", url: e.URL},
		{name: "ssl", url: "ssl://" + tlsAddr, tls: trust},
		{name: "tls", url: "tls://" + tlsAddr, tls: trust},
		{name: "ws", url: "ws://" + e.Broker.WSAddr().String() + "/mqtt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{
				Name: "links", ClientID: "links-" + tc.name, BrokerURL: tc.url, TLSConfig: tc.tls,
			}))
			if err := a.AddTool(agEchoTool()); err != nil {
				t.Fatal(err)
			}
			agRun(t, a)
			c := e.newCaller(t)
			res := agDecodeResult(t, c.call(t, "tools/call", agCallParams("echo", map[string]any{"text": big}, nil)))
			if got := res.Content[0]["text"]; got != big {
				t.Fatalf("echo of %d bytes came back as %d", len(big), len(got.(string)))
			}
		})
	}

	t.Run("untrusted certificate", func(t *testing.T) {
		o := e.agentOptions(t, expertagent.AgentOptions{Name: "links", BrokerURL: "ssl://" + tlsAddr, ConnectTimeout: agWait, ConnectRetry: -1})
		err := expertagent.NewAgent(o).Run(agContext(t))
		var unknown x509.UnknownAuthorityError
		if !errors.Is(err, expertagent.ErrAgentConnect) || !errors.As(err, &unknown) {
			t.Fatalf("Run = %v, want ErrAgentConnect for an unknown authority", err)
		}
	})
}

// TestAgentSubscribeRefused: a broker that refuses either request
// subscription (any SUBACK code from 0x80 up), the pool's or the
// instance's own, fails Run with ErrAgentSubscribe, and Ready stays open.
// Both go in one SUBSCRIBE.
func TestAgentSubscribeRefused(t *testing.T) {
	tests := []struct {
		name  string
		codes []byte // SUBACK codes, one per filter in the packet's order
		want  byte
	}{
		{name: "first 0x80", codes: []byte{0x80, 0x01}, want: 0x80},
		{name: "first 0x87", codes: []byte{0x87, 0x01}, want: 0x87},
		{name: "second 0x80", codes: []byte{0x01, 0x80}, want: 0x80},
		{name: "both 0x91", codes: []byte{0x91, 0x91}, want: 0x91},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testenv.NewScriptedBroker(t, tc.codes)
			a := expertagent.NewAgent(expertagent.AgentOptions{
				Username: "refused", BrokerURL: b.URL, ConnectTimeout: agWait, Logger: testenv.Logger(t, "agent"),
			})
			err := a.Run(agContext(t))
			if !errors.Is(err, expertagent.ErrAgentSubscribe) || !strings.Contains(err.Error(), fmt.Sprintf("SUBACK %#x", tc.want)) {
				t.Fatalf("Run = %v, want ErrAgentSubscribe for SUBACK %#x", err, tc.want)
			}
			if n := b.Subscribes.Load(); n != 1 {
				t.Errorf("%d SUBSCRIBE packets, want 1 for both filters", n)
			}
			select {
			case <-a.Ready():
				t.Error("Ready closed although the subscription was refused")
			default:
			}
		})
	}
}
