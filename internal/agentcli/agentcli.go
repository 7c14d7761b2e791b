// Package agentcli is what toolbus's expert-agent commands (cmd/expert-agent,
// cmd/conformance-agent) share: the flags that connect and run an
// expertagent.Agent, their TOOLBUS_AGENT_<FLAG> environment variables, the
// logger those flags describe, and main's handling of signals and errors.
package agentcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/buildinfo"
	"github.com/toolbus/toolbus/internal/envflag"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "TOOLBUS_AGENT_"

// ErrVersion is returned by Parse and ParseArgs once --version printed the
// version: the command has nothing more to do, and Main exits 0.
var ErrVersion = errors.New("version printed")

// ArgsError is Parse's error for words after the flags of a command that
// takes none; the command may know better what they meant (a subcommand
// given after flags, a typo of one).
type ArgsError struct {
	Args []string
}

func (e *ArgsError) Error() string { return fmt.Sprintf("unexpected arguments: %q", e.Args) }

// stdout is where --version prints; a variable for tests.
var stdout io.Writer = os.Stdout

// Common is what every agent command reads from its command line.
type Common struct {
	// Opts are the Agent's options from the flags, Version included;
	// Logger is set by NewLogger.
	Opts      expertagent.AgentOptions
	LogLevel  logrus.Level
	LogFormat string // json or text

	// passwordArg: --password was on the command line, which every user
	// of the host can read (ps, /proc/<pid>/cmdline).
	passwordArg bool
}

// Parse defines the common flags on fs (--name defaulting to name) beside
// the command's own, which the caller defined, parses args, then sets every
// flag not on the command line from TOOLBUS_AGENT_<FLAG>, and checks the
// common flags. --username is required: it is the agent's name on the bus
// (expertagent.AgentOptions.Username), and nothing could stand in for it.
//
// Words after the flags are an *ArgsError, before any other check: the
// usual cause is a misplaced word, which the other errors would hide.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string, name string) (*Common, error) {
	c, _, err := parse(fs, args, getenv, name, false)
	return c, err
}

// ParseArgs is Parse for a command that takes arguments after its flags
// (a command line after "--", say): it returns them instead of refusing
// them.
func ParseArgs(fs *flag.FlagSet, args []string, getenv func(string) string, name string) (*Common, []string, error) {
	return parse(fs, args, getenv, name, true)
}

func parse(fs *flag.FlagSet, args []string, getenv func(string) string, name string, takesArgs bool) (*Common, []string, error) {
	c := &Common{}
	o := &c.Opts
	var logLevel string
	fs.StringVar(&o.BrokerURL, "broker-url", "tcp://127.0.0.1:1883", "MQTT broker URL (tcp://, ssl://, ws://); several, comma-separated, are tried in order (the nodes of a cluster)")
	fs.StringVar(&o.Username, "username", "", "MQTT username (an identity with the expert-agent role), also the agent's name on the bus: "+
		"every instance run with it shares its requests. Required")
	fs.StringVar(&o.Password, "password", "", "MQTT password (prefer the environment variable "+EnvPrefix+"PASSWORD)")
	fs.StringVar(&o.Name, "name", name, "display name, reported in presence and serverInfo; any characters (the default client ID is made of it)")
	fs.BoolVar(&o.Exclusive, "exclusive", false, "subscribe to the pool's requests without $share, for brokers without shared subscriptions: "+
		"every instance gets (and answers) every request for any instance")
	fs.StringVar(&o.ClientID, "client-id", "", "MQTT client ID, this instance's name on the bus; unique per instance (default: name + random suffix)")
	fs.DurationVar(&o.ConnectRetry, "connect-timeout", 0, "give up when the first connection to the broker has failed for this long (0: keep trying, with backoff, until stopped)")
	fs.DurationVar(&o.PresenceEvery, "presence-every", expertagent.DefaultAgentPresenceEvery, "publish the online status again this often; gateways take an instance silent for three of these for gone "+
		"(a broker node that dies sends no Last Will); negative: never again")
	fs.IntVar(&o.Concurrency, "concurrency", expertagent.DefaultAgentConcurrency, "requests served at once")
	fs.IntVar(&o.MaxPacketSize, "max-packet-size", expertagent.DefaultAgentMaxPacketSize, "largest MQTT packet the broker accepts, in bytes "+
		"(toolbus's embedded broker: 16 MiB; Mosquitto: max_packet_size; NATS: max_payload); a larger result is answered "+
		"with an error instead, as the broker would drop the connection; negative: no check")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", expertagent.DefaultAgentShutdownTimeout, "how long to wait for calls in flight on shutdown")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	version := fs.Bool("version", false, "print the version this binary was built from (the one reported in presence and serverInfo) and exit")
	if err := envflag.Parse(fs, args); err != nil {
		return nil, nil, err
	}
	if !takesArgs && fs.NArg() > 0 {
		return nil, nil, &ArgsError{Args: fs.Args()}
	}
	if *version {
		// Before the checks: --version needs no --username.
		command, _, _ := strings.Cut(fs.Name(), " ")
		if _, err := fmt.Fprintln(stdout, command, buildinfo.Version()); err != nil {
			return nil, nil, err
		}
		return nil, nil, ErrVersion
	}
	fs.Visit(func(f *flag.Flag) { c.passwordArg = c.passwordArg || f.Name == "password" })
	if err := envflag.Apply(fs, EnvPrefix, getenv); err != nil {
		return nil, nil, err
	}
	if o.Username == "" {
		return nil, nil, fmt.Errorf("--username (or %sUSERNAME) is required: the MQTT identity with the expert-agent role, "+
			"whose name is the agent's name on the bus", EnvPrefix)
	}
	lvl, err := logrus.ParseLevel(logLevel)
	if err != nil {
		return nil, nil, fmt.Errorf("--log-level: %q is not a log level: want debug, info, warn or error", logLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return nil, nil, fmt.Errorf("--log-format: want json or text, got %q", c.LogFormat)
	}
	c.LogLevel = lvl
	// The build, as --version prints it: a module version, or "(devel)"
	// with the VCS revision and time (package buildinfo).
	o.Version = buildinfo.Version()
	return c, fs.Args(), nil
}

// NewLogger builds the logger the log flags describe, writing to out, and
// sets it as Opts.Logger.
func (c *Common) NewLogger(out io.Writer) *logrus.Entry {
	l := logrus.New()
	l.Out = out
	l.Level = c.LogLevel
	if c.LogFormat == "json" {
		l.Formatter = &logrus.JSONFormatter{}
	}
	c.Opts.Logger = logrus.NewEntry(l)
	if c.passwordArg {
		c.Opts.Logger.Warn("--password on the command line is readable by every user of this host (ps, /proc/<pid>/cmdline); " +
			"set " + EnvPrefix + "PASSWORD instead")
	}
	return c.Opts.Logger
}

// Main runs run with the command line and environment until SIGINT or
// SIGTERM, and exits 1 with the error when it fails (a signal before the
// first connection is a requested stop, not a failure).
func Main(name string, run func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.Is(err, ErrVersion):
	case errors.Is(err, context.Canceled):
	default:
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
