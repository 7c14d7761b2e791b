// Command toolbus runs the toolbus gateway and manages its store (a data
// directory, or a shared PostgreSQL database).
//
//	toolbus serve      [flags]   run the gateway with its embedded broker
//	toolbus init       [flags]   create the store
//	toolbus mqtt-user  add|list|disable|enable|passwd|remove [flags]
//	toolbus token      create|list|revoke [flags]
//	toolbus user       add|list|passwd|remove [flags]
//	toolbus oauth-client list|delete [flags]
//	toolbus acl        export --format mosquitto|nats [flags]
//	toolbus acl rule   list|add|remove [flags]
//	toolbus clients|agents|contexts [flags]
//	toolbus agents     grant|grants [flags]
//	toolbus agents     limit NAME PER_MINUTE[:BURST] | limits [flags]
//	toolbus audit      [flags]
//	toolbus config     check FILE
//	toolbus version                print the build's version (also --version)
//
// Every flag can also be set through an environment variable TOOLBUS_<FLAG>,
// e.g. --http-addr through TOOLBUS_HTTP_ADDR; a flag on the command line wins.
package main

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

	"github.com/toolbus/toolbus/internal/buildinfo"
	"github.com/toolbus/toolbus/internal/envflag"
)

const usage = `usage: toolbus <command> [flags]

commands:
  serve                  run the gateway, the embedded MQTT broker and the store
  init                   create the store in --data-dir, or its tables at --store-url (serve does too)
  mqtt-user add          add an MQTT identity (password on stdin, or generated and printed)
  mqtt-user list         list MQTT identities
  mqtt-user disable      disable an MQTT identity (with --server: its clients are disconnected)
  mqtt-user enable       enable it again
  mqtt-user passwd       change its password (on stdin, or generated and printed)
  mqtt-user remove       remove an MQTT identity and its ACL rules
  token create           create a personal access token (printed once, alone on the last line)
  token list             list personal access tokens (never their secrets)
  token revoke           revoke a personal access token
  user add               add a user who signs in to OAuth clients (password on stdin, or generated and printed)
  user list              list the sign-in users
  user passwd            change a user's password (on stdin, or generated and printed)
  user admin             give (ID on) or take back (ID off) the admin role: who may sign in to the console
  user remove            remove a user and revoke every token of theirs
  oauth-client list      list the OAuth clients registered (RFC 7591), with their live grants and tokens
  oauth-client delete    delete an OAuth client: ID, then flags; its grants, codes and tokens go (refused at once)
  acl export             write Mosquitto's (or NATS's) identities and rules from the store (--data-dir or --store-url)
  acl rule list          list topic ACL rules (the built-in ff/v2 rules too, read-only)
  acl rule add           add a topic ACL rule
  acl rule remove        remove a topic ACL rule
  clients                list the connected MQTT clients          (needs --server)
  agents                 list the expert agents and their tools   (needs --server)
  agents grant           limit a user's tokens to some agents: --user U --agents a,b ("" lifts it)
  agents grants          list the users limited to some agents
  agents limit           NAME PER_MINUTE[:BURST]: limit one agent's calls, all callers together (600:50; "" lifts it)
  agents limits          list the agents with a rate limit of their own
  contexts list          list the cached contexts                 (needs --server)
  contexts evict         evict (unsubscribe) a cached context     (needs --server)
  audit                  query the audit log (--since --until --user --tool --outcome --kind --limit)
  config check FILE      check a config file for serve (exit 0, or the line at fault)
  version                print the version this binary was built from (also --version)

The operator commands (all but serve, init, config and acl export) work through
the admin API of a running toolbus with --server URL --token T (a token with the
admin scope; changes take effect at once), or directly on the store when no
server is given: --data-dir DIR (SQLite, ./data by default) or --store-url URL (a
shared PostgreSQL store). Tables by default, --json for scripts. acl export reads
the store directly (--data-dir or --store-url, never --server): the password
hashes it writes never leave the store through the API.

Run 'toolbus <command> -h' for the flags of a command. Every flag also reads
the environment variable TOOLBUS_<FLAG> (e.g. TOOLBUS_DATA_DIR, TOOLBUS_STORE_URL,
TOOLBUS_SERVER, TOOLBUS_TOKEN). The store named on the command line (--server,
--store-url or --data-dir) wins over the environment's; else TOOLBUS_SERVER comes
first, then TOOLBUS_STORE_URL, then TOOLBUS_DATA_DIR.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "toolbus:", err)
		}
		os.Exit(2)
	}
}

// run dispatches one command line. It is main without the process around it,
// so tests can drive the CLI. -h or --help anywhere on the line prints the
// usage of what comes before it to stdout and succeeds.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if i := helpIndex(args); i >= 0 {
		return help(ctx, args, i, stdin, stdout)
	}
	return dispatch(ctx, args, stdin, stdout, stderr)
}

// helpIndex is the position of the first -h, -help or --help in args
// (before a "--"), or -1.
func helpIndex(args []string) int {
	for i, a := range args {
		switch a {
		case "--":
			return -1
		case "-h", "-help", "--help":
			return i
		}
	}
	return -1
}

// help answers a request for help: a group of commands (`toolbus token
// --help`) gets the lines of the usage that name it; a command gets its
// flag set's usage, on stdout.
func help(ctx context.Context, args []string, at int, stdin io.Reader, stdout io.Writer) error {
	words := strings.Join(args[:at], " ")
	switch words {
	case "", "help":
		_, err := fmt.Fprint(stdout, usage)
		return err
	case "token", "user", "oauth-client", "mqtt-user", "acl", "acl rule", "contexts", "config", "config check":
		fmt.Fprintf(stdout, "usage: toolbus %s ... [flags]\n\n", words)
		for _, line := range strings.Split(usage, "\n") {
			if strings.HasPrefix(line, "  "+words+" ") {
				fmt.Fprintln(stdout, line)
			}
		}
		_, err := fmt.Fprintf(stdout, "\nRun 'toolbus %s <subcommand> -h' for its flags.\n", words)
		return err
	}
	err := dispatch(ctx, args, stdin, stdout, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	if err := checkCommand(args); err != nil {
		return err
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "init":
		return runInit(ctx, rest, stdout, stderr)
	case "mqtt-user":
		return runMQTTUser(ctx, rest, stdin, stdout, stderr)
	case "token":
		return runToken(ctx, rest, stdout, stderr)
	case "user":
		return runUser(ctx, rest, stdin, stdout, stderr)
	case "oauth-client":
		return runOAuthClient(ctx, rest, stdout, stderr)
	case "acl":
		if len(rest) > 0 && rest[0] == "export" {
			return runACLExport(ctx, rest[1:], stdout, stderr)
		}
		return runACL(ctx, rest, stdout, stderr)
	case "clients":
		return runClients(ctx, withoutList(rest), stdout, stderr)
	case "agents":
		if len(rest) > 0 && rest[0] == "grant" {
			return runAgentsGrant(ctx, rest[1:], stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "grants" {
			return runAgentsGrants(ctx, rest[1:], stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "limit" {
			return runAgentsLimit(ctx, rest[1:], stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "limits" {
			return runAgentsLimits(ctx, rest[1:], stdout, stderr)
		}
		return runAgents(ctx, withoutList(rest), stdout, stderr)
	case "contexts":
		return runContexts(ctx, rest, stdout, stderr)
	case "config":
		return runConfig(ctx, rest, stdout, stderr)
	case "audit":
		return runAudit(ctx, rest, stdout, stderr)
	case "version", "-version", "--version":
		return runVersion(rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default: // checkCommand knows every command: not reached
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// withoutList drops a leading "list": `toolbus agents list` is what the
// docs show beside `contexts list`, and `toolbus agents` what it always was.
func withoutList(args []string) []string {
	if len(args) > 0 && args[0] == "list" {
		return args[1:]
	}
	return args
}

// runVersion prints "toolbus VERSION" on stdout: the version serve reports
// as serverInfo.version, from the build (package buildinfo).
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: toolbus version\n\nPrints the version this binary was built from, as serve reports it in serverInfo:\n"+
			"a module version (v1.2.3, or a pseudo-version with +dirty for a modified checkout), or\n"+
			"\"(devel) REVISION TIME\" for a build without one.\n")
	}
	if err := envflag.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected arguments %q", fs.Args())
	}
	_, err := fmt.Fprintln(stdout, "toolbus", buildinfo.Version())
	return err
}
