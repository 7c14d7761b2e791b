package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

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
			if c.opts.BrokerURL != "tcp://127.0.0.1:1883" || c.opts.Name != expertagent.DefaultAgentName || c.opts.Group != "" {
				t.Errorf("opts = %+v", c.opts)
			}
			if c.logLevel != logrus.InfoLevel || c.logFormat != "json" || c.pprofAddr != "" || c.gcFloorMiB != 64 {
				t.Errorf("log = %v %s", c.logLevel, c.logFormat)
			}
		}},
		{name: "flags", args: []string{"--broker-url", "tcp://b:1883", "--username", "u", "--password", "p", "--name", "n1",
			"--group", "g1", "--client-id", "c1", "--concurrency", "3", "--log-level", "debug", "--log-format", "text", "--exclusive"},
			check: func(t *testing.T, c config) {
				o := c.opts
				if o.BrokerURL != "tcp://b:1883" || o.Username != "u" || o.Password != "p" || o.Name != "n1" || o.Group != "g1" ||
					o.ClientID != "c1" || o.Concurrency != 3 || !o.Exclusive || c.logLevel != logrus.DebugLevel || c.logFormat != "text" {
					t.Errorf("opts = %+v, log %v %s", o, c.logLevel, c.logFormat)
				}
			}},
		{name: "environment", env: map[string]string{"TOOLBUS_AGENT_PASSWORD": "secret", "TOOLBUS_AGENT_BROKER_URL": "tcp://env:1",
			"TOOLBUS_AGENT_SHUTDOWN_TIMEOUT": "3s"},
			check: func(t *testing.T, c config) {
				if c.opts.Password != "secret" || c.opts.BrokerURL != "tcp://env:1" || c.opts.ShutdownTimeout != 3*time.Second {
					t.Errorf("opts = %+v", c.opts)
				}
			}},
		{name: "flag wins over environment", args: []string{"--username", "flag"}, env: map[string]string{"TOOLBUS_AGENT_USERNAME": "env"},
			check: func(t *testing.T, c config) {
				if c.opts.Username != "flag" {
					t.Errorf("username = %q, want flag", c.opts.Username)
				}
			}},
		{name: "pprof address", args: []string{"--pprof-addr", "127.0.0.1:6061"},
			check: func(t *testing.T, c config) {
				if c.pprofAddr != "127.0.0.1:6061" {
					t.Errorf("pprofAddr = %q", c.pprofAddr)
				}
			}},
		{name: "bad environment value", env: map[string]string{"TOOLBUS_AGENT_CONCURRENCY": "many"}, wantErr: "TOOLBUS_AGENT_CONCURRENCY"},
		{name: "GC heap floor", args: []string{"--gc-heap-floor-mib", "0"},
			check: func(t *testing.T, c config) {
				if c.gcFloorMiB != 0 {
					t.Errorf("gcFloorMiB = %d, want 0", c.gcFloorMiB)
				}
			}},
		{name: "negative GC heap floor", args: []string{"--gc-heap-floor-mib", "-1"}, wantErr: "--gc-heap-floor-mib"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: "--log-format"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
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
	err := run(ctx, []string{"--broker-url", "tcp://127.0.0.1:1", "--log-level", "error"}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, expertagent.ErrAgentConnect) {
		t.Fatalf("run = %v, want ErrAgentConnect", err)
	}
}
