package agentcli_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/agentcli"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c *agentcli.Common, own string)
		wantErr string
	}{
		{name: "defaults", args: []string{"--username", "a1"}, check: func(t *testing.T, c *agentcli.Common, own string) {
			o := c.Opts
			if o.BrokerURL != "tcp://127.0.0.1:1883" || o.Username != "a1" || o.Name != "the-name" || o.ClientID != "" || o.Exclusive ||
				o.Concurrency != expertagent.DefaultAgentConcurrency || o.ShutdownTimeout != expertagent.DefaultAgentShutdownTimeout || o.Version == "" ||
				o.PresenceEvery != expertagent.DefaultAgentPresenceEvery {
				t.Errorf("opts = %+v", o)
			}
			if c.LogLevel != logrus.InfoLevel || c.LogFormat != "json" || own != "" {
				t.Errorf("log = %v %s, own flag %q", c.LogLevel, c.LogFormat, own)
			}
		}},
		{name: "flags", args: []string{"--broker-url", "tcp://b:1883", "--username", "u", "--password", "p", "--name", "n1",
			"--client-id", "c1", "--concurrency", "3", "--log-level", "debug", "--log-format", "text", "--exclusive",
			"--shutdown-timeout", "3s", "--presence-every", "5s", "--own", "x"},
			check: func(t *testing.T, c *agentcli.Common, own string) {
				o := c.Opts
				if o.BrokerURL != "tcp://b:1883" || o.Username != "u" || o.Password != "p" || o.Name != "n1" ||
					o.ClientID != "c1" || o.Concurrency != 3 || !o.Exclusive || o.ShutdownTimeout != 3*time.Second || o.PresenceEvery != 5*time.Second ||
					c.LogLevel != logrus.DebugLevel || c.LogFormat != "text" || own != "x" {
					t.Errorf("opts = %+v, log %v %s, own %q", o, c.LogLevel, c.LogFormat, own)
				}
			}},
		{name: "environment", env: map[string]string{"TOOLBUS_AGENT_USERNAME": "env-agent", "TOOLBUS_AGENT_PASSWORD": "secret",
			"TOOLBUS_AGENT_BROKER_URL": "tcp://env:1", "TOOLBUS_AGENT_EXCLUSIVE": "true", "TOOLBUS_AGENT_OWN": "from-env"},
			check: func(t *testing.T, c *agentcli.Common, own string) {
				if c.Opts.Username != "env-agent" || c.Opts.Password != "secret" || c.Opts.BrokerURL != "tcp://env:1" || !c.Opts.Exclusive || own != "from-env" {
					t.Errorf("opts = %+v, own %q", c.Opts, own)
				}
			}},
		{name: "flag wins over environment", args: []string{"--username", "flag"}, env: map[string]string{"TOOLBUS_AGENT_USERNAME": "env"},
			check: func(t *testing.T, c *agentcli.Common, _ string) {
				if c.Opts.Username != "flag" {
					t.Errorf("username = %q, want flag", c.Opts.Username)
				}
			}},
		{name: "no username", wantErr: "--username (or TOOLBUS_AGENT_USERNAME) is required"},
		{name: "empty username in the environment", env: map[string]string{"TOOLBUS_AGENT_USERNAME": ""}, wantErr: "--username"},
		{name: "bad environment value", args: []string{"--username", "a1"}, env: map[string]string{"TOOLBUS_AGENT_CONCURRENCY": "many"},
			wantErr: "TOOLBUS_AGENT_CONCURRENCY"},
		{name: "bad log level", args: []string{"--username", "a1", "--log-level", "loud"}, wantErr: `--log-level: "loud" is not a log level: want debug, info, warn or error`},
		{name: "bad environment duration", args: []string{"--username", "a1"}, env: map[string]string{"TOOLBUS_AGENT_SHUTDOWN_TIMEOUT": "soon"},
			wantErr: `TOOLBUS_AGENT_SHUTDOWN_TIMEOUT: invalid value "soon": want a duration`},
		// Before the other checks: a misplaced word explains them.
		{name: "stray argument first", args: []string{"--log-level", "debug", "bridge"}, wantErr: `unexpected arguments: ["bridge"]`},
		{name: "bad log format", args: []string{"--username", "a1", "--log-format", "xml"}, wantErr: "--log-format"},
		{name: "stray argument", args: []string{"--username", "a1", "serve"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined: --nope (-h lists the flags)"},
		{name: "flag typo", args: []string{"--usrname", "a1"}, wantErr: "flag provided but not defined: --usrname; did you mean --username?"},
		// A pool is every instance of one username now; --group is gone.
		{name: "group flag", args: []string{"--username", "a1", "--group", "g1"}, wantErr: "flag provided but not defined: --group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			own := fs.String("own", "", "a flag of the command's own")
			c, err := agentcli.Parse(fs, tc.args, func(k string) string { return tc.env[k] }, "the-name")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c, *own)
		})
	}
}

func TestNewLogger(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			c, err := agentcli.Parse(fs, []string{"--username", "a1", "--log-format", format, "--log-level", "warn"}, func(string) string { return "" }, "n")
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			log := c.NewLogger(&out)
			if c.Opts.Logger != log {
				t.Error("Opts.Logger is not the new logger")
			}
			log.Info("hidden")
			log.Warn("shown")
			got := out.String()
			if strings.Contains(got, "hidden") || !strings.Contains(got, "shown") {
				t.Errorf("output %q: want the warning only", got)
			}
			if isJSON := strings.HasPrefix(got, "{"); isJSON != (format == "json") {
				t.Errorf("output %q is not %s", got, format)
			}
		})
	}
}

// --version prints the command's name and the build's version (the one
// Parse puts in Opts.Version) and needs no --username: Parse returns
// ErrVersion, which Main takes for success.
func TestParseVersion(t *testing.T) {
	var out bytes.Buffer
	t.Cleanup(agentcli.SetStdout(&out))
	fs := flag.NewFlagSet("some-agent sub", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err := agentcli.Parse(fs, []string{"--version"}, func(string) string { return "" }, "x")
	if !errors.Is(err, agentcli.ErrVersion) {
		t.Fatalf("Parse(--version) = %v, want ErrVersion", err)
	}
	fs = flag.NewFlagSet("some-agent", flag.ContinueOnError)
	c, err := agentcli.Parse(fs, []string{"--username", "u"}, func(string) string { return "" }, "x")
	if err != nil {
		t.Fatal(err)
	}
	if want := "some-agent " + c.Opts.Version + "\n"; out.String() != want || c.Opts.Version == expertagent.DefaultAgentVersion {
		t.Errorf("--version printed %q, want %q, the build's version rather than %q", out.String(), want, expertagent.DefaultAgentVersion)
	}
}
