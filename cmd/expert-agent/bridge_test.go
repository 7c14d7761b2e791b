package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/expertagent"
)

func TestParseBridgeFlags(t *testing.T) {
	base := []string{"--username", "files"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c bridgeConfig)
		wantErr string
	}{
		{name: "stdio command", args: []string{"--", "npx", "-y", "server", "--flag"}, check: func(t *testing.T, c bridgeConfig) {
			if !slices.Equal(c.opts.Command, []string{"npx", "-y", "server", "--flag"}) || c.opts.URL != "" || c.Opts.Name != "" {
				t.Errorf("command %q, url %q, name %q", c.opts.Command, c.opts.URL, c.Opts.Name)
			}
		}},
		{name: "http with headers", args: []string{"--upstream-url", "http://127.0.0.1:9000/mcp", "--upstream-header", "authorization: Bearer x",
			"--upstream-header", "X-Team:  blue "}, check: func(t *testing.T, c bridgeConfig) {
			if c.opts.URL != "http://127.0.0.1:9000/mcp" || c.opts.Header.Get("Authorization") != "Bearer x" || c.opts.Header.Get("X-Team") != "blue" {
				t.Errorf("url %q, header %v", c.opts.URL, c.opts.Header)
			}
		}},
		{name: "header from the environment", args: []string{"--upstream-url", "https://mcp.example/mcp"},
			env: map[string]string{"TOOLBUS_AGENT_UPSTREAM_HEADER": "Authorization: Bearer from-env"}, check: func(t *testing.T, c bridgeConfig) {
				if c.opts.Header.Get("Authorization") != "Bearer from-env" {
					t.Errorf("header %v", c.opts.Header)
				}
			}},
		{name: "protocol pinned", args: []string{"--upstream-protocol", "2025-11-25", "--", "srv"}, check: func(t *testing.T, c bridgeConfig) {
			if c.opts.ProtocolVersion != "2025-11-25" {
				t.Errorf("protocol %q", c.opts.ProtocolVersion)
			}
		}},
		{name: "size limits", args: []string{"--upstream-max-message", "1024", "--max-packet-size", "2048", "--", "srv"}, check: func(t *testing.T, c bridgeConfig) {
			if c.opts.MaxMessage != 1024 || c.Opts.MaxPacketSize != 2048 {
				t.Errorf("max message %d, max packet size %d", c.opts.MaxMessage, c.Opts.MaxPacketSize)
			}
		}},
		{name: "default size limits", args: []string{"--", "srv"}, check: func(t *testing.T, c bridgeConfig) {
			if c.opts.MaxMessage != bridge.DefaultMaxMessage || c.Opts.MaxPacketSize != expertagent.DefaultAgentMaxPacketSize {
				t.Errorf("max message %d, max packet size %d", c.opts.MaxMessage, c.Opts.MaxPacketSize)
			}
		}},
		{name: "zero max message", args: []string{"--upstream-max-message", "0", "--", "srv"}, wantErr: "--upstream-max-message"},
		{name: "no upstream", wantErr: "no upstream"},
		{name: "both upstreams", args: []string{"--upstream-url", "http://h/mcp", "--", "srv"}, wantErr: "not both"},
		{name: "not an http URL", args: []string{"--upstream-url", "ftp://h/mcp"}, wantErr: "http:// or https://"},
		{name: "a bad URL's credentials are not echoed", args: []string{"--upstream-url", "ftp://bob:s3cret@h/mcp?api_key=k3y"}, check: nil,
			wantErr: "http:// or https://"},
		{name: "header without URL", args: []string{"--upstream-header", "A: b", "--", "srv"}, wantErr: "goes with --upstream-url"},
		{name: "header without colon", args: []string{"--upstream-url", "http://h/mcp", "--upstream-header", "Bearer x"}, wantErr: "Name: value"},
		{name: "zero hold timeout", args: []string{"--hold-timeout", "0s", "--", "srv"}, wantErr: "--hold-timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			c, err := parseBridgeFlags(append(slices.Clone(base), tc.args...), getenv, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "k3y") {
					t.Errorf("err = %v: it shows the URL's credentials", err)
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

// -h prints the bridge's usage, not the reference agent's.
func TestBridgeHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseBridgeFlags([]string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "expert-agent bridge [flags] -- COMMAND") || !strings.Contains(out.String(), "-upstream-url") {
		t.Errorf("err %v, usage:\n%s", err, out.String())
	}
}
