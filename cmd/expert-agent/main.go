// Command expert-agent is toolbus's reference expert agent: an MCP server on
// MQTT that serves a few small tools (echo, word_count, sha256, countdown,
// time_now) to the gateway. It is also the example to copy when writing an
// agent with package expertagent.
//
//	expert-agent --broker-url tcp://127.0.0.1:1883 --username NAME --password PASS
//
// NAME (required), an identity with the expert-agent role, is also the
// agent's name on the bus: every instance run with it is one pool, which
// shares the requests for any instance; --client-id names the instance.
//
// --tools echo,sha256 serves only those of its tools (default: all), so that
// one binary can play several distinct agents in demos and tests.
//
// --extra-tools N adds N trivial tools (tool_0001 ... ) beside the real ones,
// for benchmarks of tools/list with many tools (scripts/bench.sh).
//
// --pprof-addr 127.0.0.1:6061 serves Go's runtime profiles on a listener of
// their own (off by default). --gc-heap-floor-mib (default 64) lets the
// heap grow that far before Go collects it: a busy agent keeps little live
// and would otherwise collect several times a second (see package gctune).
//
// `expert-agent bridge` serves an existing MCP server instead (package
// bridge): a stdio server it starts (`-- COMMAND ARG...`) or a Streamable
// HTTP one (--upstream-url), with the same broker flags.
//
// --version prints the version this binary was built from, which the agent
// also reports in presence and serverInfo (package internal/buildinfo).
// --name is for people and may hold any character: the default client ID
// is made of it, fit for a topic level.
//
// Every flag also reads the environment variable TOOLBUS_AGENT_<FLAG>
// (e.g. TOOLBUS_AGENT_PASSWORD); a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // time_now must know IANA zones on hosts without a zoneinfo database

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/agentcli"
	"github.com/toolbus/toolbus/internal/envflag"
	"github.com/toolbus/toolbus/internal/gctune"
	"github.com/toolbus/toolbus/internal/pprofserver"
)

func main() { agentcli.Main("expert-agent", run) }

// config is the parsed command line.
type config struct {
	*agentcli.Common
	pprofAddr string // "" = no profiles served
	gcFloor   int64  // --gc-heap-floor-mib, in bytes
	// only names the real tools to serve; nil = all of them.
	only []string
	// extraTools is how many trivial tools to serve beside the real ones.
	extraTools int
}

// parseFlags reads args, then TOOLBUS_AGENT_<FLAG> for every flag not on the
// command line.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("expert-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("tools", "", "serve only these of the reference tools, comma-separated ("+strings.Join(toolNames(), ",")+"); default all")
	fs.IntVar(&c.extraTools, "extra-tools", 0, fmt.Sprintf("serve this many trivial extra tools (tool_0001 ...; at most %d) beside the real ones, for benchmarks", maxExtraTools))
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6061); off by default")
	var gcFloorMiB int
	gctune.FlagVar(fs, &gcFloorMiB)
	common, err := agentcli.Parse(fs, args, getenv, expertagent.DefaultAgentName)
	if err != nil {
		return config{}, err
	}
	c.Common = common
	if c.gcFloor, err = gctune.FloorFromMiB(gcFloorMiB); err != nil {
		return config{}, err
	}
	if c.only, err = parseToolNames(*only); err != nil {
		return config{}, err
	}
	if c.extraTools < 0 || c.extraTools > maxExtraTools {
		return config{}, fmt.Errorf("--extra-tools: want 0 to %d, got %d", maxExtraTools, c.extraTools)
	}
	return c, nil
}

// run serves until ctx is done (SIGINT/SIGTERM in main).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "bridge" {
		return runBridge(ctx, args[1:], getenv, stderr)
	}
	c, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return argsError(err)
	}
	log := c.NewLogger(stderr)
	if c.pprofAddr != "" {
		stopPprof, err := pprofserver.Serve(c.pprofAddr, log.WithField("component", "pprof"))
		if err != nil {
			return err
		}
		defer stopPprof()
	}

	gc := gctune.Start(gctune.Options{Floor: c.gcFloor, Logger: log.WithField("component", "gctune")})
	defer gc.Close()

	agent := expertagent.NewAgent(c.Opts)
	for _, t := range append(selectTools(tools(time.Second, time.Now), c.only), extraTools(c.extraTools)...) {
		if err := agent.AddTool(t); err != nil {
			return err
		}
	}
	return agent.Run(ctx)
}

// argsError says what words after the reference agent's flags were meant
// to be: `bridge` after flags (which then belong to the reference agent,
// not the bridge), or a typo of it. Other errors pass as they are.
func argsError(err error) error {
	var ae *agentcli.ArgsError
	if !errors.As(err, &ae) {
		return err
	}
	switch word := ae.Args[0]; {
	case word == "bridge":
		return errors.New(`"bridge" must come first, before its flags: expert-agent bridge [flags] -- COMMAND [ARG...] ` +
			`(flags before "bridge" are the reference agent's)`)
	case envflag.Suggest(word, []string{"bridge"}) != "":
		return fmt.Errorf("unknown subcommand %q; did you mean \"bridge\"?", word)
	}
	return err
}

// toolNames lists the reference tools' names, in serving order.
func toolNames() []string {
	var names []string
	for _, t := range tools(time.Second, time.Now) {
		names = append(names, t.Name)
	}
	return names
}

// parseToolNames reads --tools: names of reference tools, comma-separated,
// each at most once. "" is nil (all tools).
func parseToolNames(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	valid := toolNames()
	var names []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		switch {
		case !slices.Contains(valid, n):
			return nil, fmt.Errorf("--tools: no tool %q; the tools are %s", n, strings.Join(valid, ", "))
		case slices.Contains(names, n):
			return nil, fmt.Errorf("--tools: %q is listed twice", n)
		}
		names = append(names, n)
	}
	return names, nil
}

// selectTools keeps the tools named in only (all of them for nil).
func selectTools(all []expertagent.Tool, only []string) []expertagent.Tool {
	if only == nil {
		return all
	}
	return slices.DeleteFunc(all, func(t expertagent.Tool) bool { return !slices.Contains(only, t.Name) })
}
