package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/expertagent"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			if c.Opts.BrokerURL != "tcp://127.0.0.1:1883" || c.Opts.Username != "ref-agent" || c.Opts.Name != expertagent.DefaultAgentName || c.Opts.Exclusive {
				t.Errorf("opts = %+v", c.Opts)
			}
			if c.pprofAddr != "" || c.gcFloor != 64<<20 || c.extraTools != 0 {
				t.Errorf("pprof %q, GC floor %d, extra tools %d", c.pprofAddr, c.gcFloor, c.extraTools)
			}
		}},
		{name: "pprof address", args: []string{"--pprof-addr", "127.0.0.1:6061"},
			check: func(t *testing.T, c config) {
				if c.pprofAddr != "127.0.0.1:6061" {
					t.Errorf("pprofAddr = %q", c.pprofAddr)
				}
			}},
		{name: "GC heap floor", args: []string{"--gc-heap-floor-mib", "0"},
			check: func(t *testing.T, c config) {
				if c.gcFloor != 0 {
					t.Errorf("gcFloor = %d, want 0", c.gcFloor)
				}
			}},
		{name: "negative GC heap floor", args: []string{"--gc-heap-floor-mib", "-1"}, wantErr: "--gc-heap-floor-mib"},
		{name: "own flag from the environment", env: map[string]string{"TOOLBUS_AGENT_EXTRA_TOOLS": "7"},
			check: func(t *testing.T, c config) {
				if c.extraTools != 7 {
					t.Errorf("extraTools = %d, want 7", c.extraTools)
				}
			}},
		{name: "common flag checked (internal/agentcli)", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "username required (internal/agentcli)", env: map[string]string{"TOOLBUS_AGENT_USERNAME": ""}, wantErr: "--username"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, withUsername(tc.env), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// withUsername is a getenv of env that has TOOLBUS_AGENT_USERNAME
// "ref-agent" unless env sets it: a username is required, and the tests of
// the other flags need one.
func withUsername(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "TOOLBUS_AGENT_USERNAME" {
			return "ref-agent"
		}
		return ""
	}
}

func TestRunHelp(t *testing.T) {
	err := run(t.Context(), []string{"--help"}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
}

func TestRunFailsWithoutBroker(t *testing.T) {
	// Nothing listens on port 1: Run must fail fast with ErrAgentConnect, not hang.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := run(ctx, []string{"--broker-url", "tcp://127.0.0.1:1", "--username", "ref-agent", "--log-level", "error", "--connect-timeout", "1ms"}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, expertagent.ErrAgentConnect) {
		t.Fatalf("run = %v, want ErrAgentConnect", err)
	}
}
