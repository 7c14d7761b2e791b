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
	"flag"
	"fmt"
	"io"

	"github.com/toolbus/toolbus/conformance"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/agentcli"
)

// defaultName is the agent's name (presence, serverInfo, shared group).
const defaultName = "conformance"

func main() { agentcli.Main("conformance-agent", run) }

// config is the parsed command line.
type config struct {
	*agentcli.Common
	fixture conformance.Options
}

// parseFlags reads args, then TOOLBUS_AGENT_<FLAG> for every flag not on the
// command line.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var (
		c        config
		stateKey string
	)
	fs := flag.NewFlagSet("conformance-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&stateKey, "state-key", "", fmt.Sprintf("secret (at least %d bytes) that seals requestState; instances of one group need the same one "+
		"(prefer the environment variable %sSTATE_KEY). Default: random per process", conformance.MinStateKeyLen, agentcli.EnvPrefix))
	fs.DurationVar(&c.fixture.StateTTL, "state-ttl", conformance.DefaultStateTTL, "how long a requestState stays valid")
	common, err := agentcli.Parse(fs, args, getenv, defaultName)
	if err != nil {
		return config{}, err
	}
	c.Common = common
	if stateKey != "" {
		if len(stateKey) < conformance.MinStateKeyLen {
			return config{}, fmt.Errorf("--state-key: %d bytes, want at least %d", len(stateKey), conformance.MinStateKeyLen)
		}
		c.fixture.StateKey = []byte(stateKey)
	}
	if c.fixture.StateTTL <= 0 {
		return config{}, fmt.Errorf("--state-ttl: want a positive duration, got %s", c.fixture.StateTTL)
	}
	return c, nil
}

// run serves until ctx is done (SIGINT/SIGTERM in main).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	c.fixture.Logger = c.NewLogger(stderr)

	agent := expertagent.NewAgent(c.Opts)
	if err := conformance.Register(agent, c.fixture); err != nil {
		return err
	}
	return agent.Run(ctx)
}
