// Command conformance-agent serves the MCP conformance suite's fixture
// (package conformance: the tools, resources, prompts and completions the
// suite's server scenarios call) as an expert agent over MQTT, so that the
// suite runs through the gateway and the broker.
//
//	conformance-agent --broker-url tcp://127.0.0.1:1883 --username NAME --password PASS
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
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/conformance"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/envflag"
)

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "TOOLBUS_AGENT_"

// defaultName is the agent's name (presence, serverInfo, shared group).
const defaultName = "conformance"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, context.Canceled): // a signal before the first connection: still a requested stop
	default:
		fmt.Fprintln(os.Stderr, "conformance-agent:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	opts      expertagent.AgentOptions
	fixture   conformance.Options
	logLevel  logrus.Level
	logFormat string
}

// parseFlags reads args, then TOOLBUS_AGENT_<FLAG> for every flag not on the
// command line.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var (
		c                             config
		logLevel, logFormat, stateKey string
	)
	fs := flag.NewFlagSet("conformance-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.opts.BrokerURL, "broker-url", "tcp://127.0.0.1:1883", "MQTT broker URL (tcp://, ssl://, ws://)")
	fs.StringVar(&c.opts.Username, "username", "", "MQTT username (an identity with the expert-agent role)")
	fs.StringVar(&c.opts.Password, "password", "", "MQTT password (prefer the environment variable "+envPrefix+"PASSWORD)")
	fs.StringVar(&c.opts.Name, "name", defaultName, "agent name, reported in presence and serverInfo")
	fs.StringVar(&c.opts.Group, "group", "", "shared-subscription group (default: the name); instances of one group share requests")
	fs.BoolVar(&c.opts.Exclusive, "exclusive", false, "subscribe without a shared group: every instance answers every request")
	fs.StringVar(&c.opts.ClientID, "client-id", "", "MQTT client ID (default: name + random suffix)")
	fs.IntVar(&c.opts.Concurrency, "concurrency", expertagent.DefaultAgentConcurrency, "requests served at once")
	fs.DurationVar(&c.opts.ShutdownTimeout, "shutdown-timeout", expertagent.DefaultAgentShutdownTimeout, "how long to wait for calls in flight on shutdown")
	fs.StringVar(&stateKey, "state-key", "", fmt.Sprintf("secret (at least %d bytes) that seals requestState; instances of one group need the same one "+
		"(prefer the environment variable %sSTATE_KEY). Default: random per process", conformance.MinStateKeyLen, envPrefix))
	fs.DurationVar(&c.fixture.StateTTL, "state-ttl", conformance.DefaultStateTTL, "how long a requestState stays valid")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "json", "log format: json or text")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := envflag.Apply(fs, envPrefix, getenv); err != nil {
		return config{}, err
	}
	lvl, err := logrus.ParseLevel(logLevel)
	if err != nil {
		return config{}, fmt.Errorf("--log-level: %w", err)
	}
	if logFormat != "json" && logFormat != "text" {
		return config{}, fmt.Errorf("--log-format: want json or text, got %q", logFormat)
	}
	if stateKey != "" {
		if len(stateKey) < conformance.MinStateKeyLen {
			return config{}, fmt.Errorf("--state-key: %d bytes, want at least %d", len(stateKey), conformance.MinStateKeyLen)
		}
		c.fixture.StateKey = []byte(stateKey)
	}
	if c.fixture.StateTTL <= 0 {
		return config{}, fmt.Errorf("--state-ttl: want a positive duration, got %s", c.fixture.StateTTL)
	}
	c.logLevel, c.logFormat = lvl, logFormat
	c.opts.Version = buildVersion()
	return c, nil
}

// buildVersion is the module version the binary was built from, or "dev".
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return expertagent.DefaultAgentVersion
}

// run serves until ctx is done (SIGINT/SIGTERM in main).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := logrus.New()
	logger.Out = stderr
	logger.Level = c.logLevel
	if c.logFormat == "json" {
		logger.Formatter = &logrus.JSONFormatter{}
	}
	c.opts.Logger = logrus.NewEntry(logger)
	c.fixture.Logger = c.opts.Logger

	agent := expertagent.NewAgent(c.opts)
	if err := conformance.Register(agent, c.fixture); err != nil {
		return err
	}
	return agent.Run(ctx)
}
