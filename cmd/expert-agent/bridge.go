package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/internal/agentcli"
)

// bridgeUsage heads `expert-agent bridge -h`.
const bridgeUsage = `Usage:
  expert-agent bridge [flags] -- COMMAND [ARG...]     a stdio MCP server, started and restarted by the bridge
  expert-agent bridge [flags] --upstream-url URL      a Streamable HTTP MCP server

Serves an existing MCP server's tools, resources, prompts and completions on
the bus as the expert agent --username. The bridge connects outbound only.

Flags:
`

// bridgeConfig is the parsed command line of `expert-agent bridge`.
type bridgeConfig struct {
	*agentcli.Common
	opts bridge.Options
}

// headerFlag collects --upstream-header 'Name: value'.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" } // values are credentials: never shown

func (f *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want 'Name: value', got %q", s)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value))
	return nil
}

func parseBridgeFlags(args []string, getenv func(string) string, stderr io.Writer) (bridgeConfig, error) {
	var (
		c       bridgeConfig
		headers headerFlag
	)
	fs := flag.NewFlagSet("expert-agent bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), bridgeUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.opts.URL, "upstream-url", "", "the upstream's Streamable HTTP endpoint (instead of a command after --)")
	fs.Var(&headers, "upstream-header", "header sent with every request to --upstream-url, 'Name: value' (repeatable; prefer "+
		agentcli.EnvPrefix+"UPSTREAM_HEADER for one holding a credential)")
	fs.StringVar(&c.opts.ProtocolVersion, "upstream-protocol", "", "MCP version to ask the upstream for, e.g. 2025-11-25 (default: the newest the bridge knows; the upstream may lower it)")
	fs.StringVar(&c.opts.Dir, "upstream-dir", "", "working directory of the upstream command (default: the bridge's)")
	fs.IntVar(&c.opts.MaxMessage, "upstream-max-message", bridge.DefaultMaxMessage, "largest message read from the upstream, in bytes "+
		"(a stdio line, an HTTP body, an event): a longer answer is not kept, and its call gets an error; longer notifications are dropped")
	fs.DurationVar(&c.opts.HoldTimeout, "hold-timeout", bridge.DefaultHoldTimeout, "how long a call that waits for the client's input (sampling, elicitation, roots) is held")
	fs.DurationVar(&c.opts.InitTimeout, "init-timeout", bridge.DefaultInitTimeout, "bound on starting the upstream and its initialize")
	fs.DurationVar(&c.opts.RestartMax, "restart-max", bridge.DefaultRestartMax, "longest wait between two starts of an upstream that keeps failing")
	// The display name defaults to the upstream's own (serverInfo).
	common, rest, err := agentcli.ParseArgs(fs, args, getenv, "")
	if err != nil {
		return bridgeConfig{}, err
	}
	c.Common = common
	c.opts.Command = rest
	c.opts.Header = headers.h
	switch {
	case len(rest) == 0 && c.opts.URL == "":
		return bridgeConfig{}, fmt.Errorf("no upstream: give the MCP server's command after --, or --upstream-url")
	case len(rest) > 0 && c.opts.URL != "":
		return bridgeConfig{}, fmt.Errorf("give the MCP server's command after -- or --upstream-url, not both")
	case c.opts.URL != "":
		u, err := url.Parse(c.opts.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// Not the URL itself: it may hold credentials.
			return bridgeConfig{}, fmt.Errorf("--upstream-url: want an http:// or https:// URL with a host")
		}
	case len(headers.h) > 0:
		return bridgeConfig{}, fmt.Errorf("--upstream-header goes with --upstream-url; a stdio server takes its credentials from its environment")
	}
	for _, d := range []struct {
		name string
		v    int64
	}{{"hold-timeout", int64(c.opts.HoldTimeout)}, {"init-timeout", int64(c.opts.InitTimeout)}, {"restart-max", int64(c.opts.RestartMax)}} {
		if d.v <= 0 {
			return bridgeConfig{}, fmt.Errorf("--%s: want a positive duration", d.name)
		}
	}
	if c.opts.MaxMessage <= 0 {
		return bridgeConfig{}, fmt.Errorf("--upstream-max-message: want a positive number of bytes")
	}
	return c, nil
}

// runBridge serves an existing MCP server on the bus until ctx is done.
func runBridge(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, err := parseBridgeFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	c.opts.Agent = c.Opts
	c.opts.Logger = c.NewLogger(stderr)
	// The stdio server runs as the bridge's user: undumpable, the bridge
	// keeps its environment (the broker password), memory and descriptors
	// from it (docs/bridge.md).
	if err := agentcli.Undumpable(); err != nil {
		c.opts.Logger.WithError(err).Warn("cannot make the process undumpable; processes of the same user can read its environment")
	}
	b, err := bridge.New(c.opts)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}
