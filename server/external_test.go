package server

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestCheckExternal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
		wantID  string
	}{
		{name: "embedded", cfg: Config{}},
		{name: "client id from platform id", cfg: Config{PlatformID: "gw-a", BrokerURL: "tcp://h:1883", BrokerUsername: "gw"}, wantID: "toolbus-gw-a"},
		{name: "client id given", cfg: Config{PlatformID: "gw-a", BrokerURL: "ssl://h:8883", BrokerUsername: "gw", BrokerClientID: "mine", BrokerTLS: &tls.Config{}}, wantID: "mine"},
		{name: "no username", cfg: Config{BrokerURL: "tcp://h:1883"}, wantErr: "username"},
		{name: "bad scheme", cfg: Config{BrokerURL: "http://h:1883", BrokerUsername: "gw"}, wantErr: "want tcp://"},
		{name: "no host", cfg: Config{BrokerURL: "tcp://", BrokerUsername: "gw"}, wantErr: "no host"},
		{name: "tls without ssl", cfg: Config{BrokerURL: "tcp://h:1883", BrokerUsername: "gw", BrokerTLS: &tls.Config{}}, wantErr: "ssl://"},
		{name: "credentials without url", cfg: Config{BrokerUsername: "gw"}, wantErr: "without a broker URL"},
		{name: "the nodes of a cluster", cfg: Config{PlatformID: "gw-a", BrokerURL: "tcp://n1:1883, tcp://n2:1883,tcp://n3:1883", BrokerUsername: "gw"}, wantID: "toolbus-gw-a"},
		{name: "a bad node in the list", cfg: Config{BrokerURL: "tcp://n1:1883,http://n2:1883", BrokerUsername: "gw"}, wantErr: `"http://n2:1883": want tcp://`},
		{name: "commas only", cfg: Config{BrokerURL: ", ,", BrokerUsername: "gw"}, wantErr: "no URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := checkExternal(&cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.BrokerClientID != tc.wantID {
				t.Fatalf("client id %q, want %q", cfg.BrokerClientID, tc.wantID)
			}
		})
	}
}
