package agentcli_test

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/agentcli"
)

// A password on the command line is readable by every user of the host:
// the agent says so, and one from the environment is not warned about.
func TestPasswordOnCommandLineWarned(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		warn bool
	}{
		{name: "flag", args: []string{"--username", "a", "--password", "p"}, warn: true},
		{name: "environment", args: []string{"--username", "a"}, env: map[string]string{"TOOLBUS_AGENT_PASSWORD": "p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c, err := agentcli.Parse(fs, tt.args, func(k string) string { return tt.env[k] }, "n")
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			c.NewLogger(&out)
			if got := strings.Contains(out.String(), "TOOLBUS_AGENT_PASSWORD instead"); got != tt.warn {
				t.Errorf("warned %v, want %v: %s", got, tt.warn, out.String())
			}
		})
	}
}
