package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/envflag"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// door is the operators' model as the CLI reaches it: through the admin API
// of a running toolbus (*admin.Client) or directly on a data directory
// (*admin.Service over the store). Both return the same types, so every
// command prints the same whichever door it used.
type door interface {
	ListTokens(ctx context.Context, user string) ([]admin.Token, error)
	CreateToken(ctx context.Context, req admin.TokenRequest) (admin.CreatedToken, error)
	RevokeToken(ctx context.Context, id string) error

	ListUserAgents(ctx context.Context) ([]admin.UserAgents, error)
	SetUserAgents(ctx context.Context, user string, req admin.UserAgentsRequest) (admin.UserAgents, error)

	ListUsers(ctx context.Context) ([]admin.User, error)
	AddUser(ctx context.Context, req admin.UserRequest) (admin.UserChange, error)
	SetUserPassword(ctx context.Context, user string, req admin.PasswordRequest) (admin.UserChange, error)
	RemoveUser(ctx context.Context, user string) (admin.UserChange, error)

	ListIdentities(ctx context.Context) ([]admin.Identity, error)
	AddIdentity(ctx context.Context, req admin.IdentityRequest) (admin.IdentityChange, error)
	SetDisabled(ctx context.Context, username string, disabled bool) (admin.IdentityChange, error)
	SetPassword(ctx context.Context, username string, req admin.PasswordRequest) (admin.IdentityChange, error)
	RemoveIdentity(ctx context.Context, username string) (admin.IdentityChange, error)

	ListRules(ctx context.Context) ([]admin.Rule, error)
	AddRule(ctx context.Context, req admin.RuleRequest) (admin.Rule, error)
	RemoveRule(ctx context.Context, id string) error

	Clients(ctx context.Context) ([]admin.MQTTClient, error)
	Agents(ctx context.Context) (admin.Agents, error)
	Contexts(ctx context.Context, user string) ([]admin.Context, error)
	EvictContext(ctx context.Context, key string) error

	Audit(ctx context.Context, q admin.AuditQuery) (admin.AuditPage, error)
}

var (
	_ door = (*admin.Client)(nil)
	_ door = (*admin.Service)(nil)
)

// doorFlags are the flags that choose the door, shared by the operator
// commands.
type doorFlags struct {
	server, token, dataDir string
	json                   bool
	dataDirOnCommandLine   bool
}

func addDoorFlags(fs *flag.FlagSet, withJSON bool) *doorFlags {
	d := &doorFlags{}
	fs.StringVar(&d.server, "server", "", "URL of a running toolbus (e.g. http://127.0.0.1:8080): work through its admin API")
	fs.StringVar(&d.token, "token", "", "token with the admin scope, for --server")
	fs.StringVar(&d.dataDir, "data-dir", "./data", "directory of the store, when no --server is given")
	if withJSON {
		fs.BoolVar(&d.json, "json", false, "print JSON instead of a table")
	}
	return d
}

// parseDoorFlags parses args like parseFlags, and notes whether --data-dir
// was on the command line: it then wins over a TOOLBUS_SERVER from the
// environment.
func parseDoorFlags(fs *flag.FlagSet, d *doorFlags, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	serverOnCommandLine := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "data-dir":
			d.dataDirOnCommandLine = true
		case "server":
			serverOnCommandLine = true
		}
	})
	if d.dataDirOnCommandLine && serverOnCommandLine {
		return errors.New("give --server or --data-dir, not both")
	}
	if err := envflag.Apply(fs, "TOOLBUS_", os.Getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if d.dataDirOnCommandLine {
		d.server = ""
	}
	return nil
}

// remote reports whether the command works through a server.
func (d *doorFlags) remote() bool { return d.server != "" }

// doorOpen says how the data-directory door opens the store.
type doorOpen int

const (
	existingStore doorOpen = iota // fail if there is none: only serve and init create a store
	serverOnly                    // no data-directory door (clients, agents, contexts)
)

// open returns the door the flags choose and the function that closes it.
// cmd names the command in errors.
func (d *doorFlags) open(ctx context.Context, cmd string, how doorOpen) (door, func(), error) {
	if d.remote() {
		if d.token == "" {
			return nil, nil, fmt.Errorf("%s: --server needs --token (or TOOLBUS_TOKEN): a token with the %s scope", cmd, store.ScopeAdmin)
		}
		c, err := admin.NewClient(d.server, d.token, admin.ClientOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", cmd, err)
		}
		return c, func() {}, nil
	}
	if how == serverOnly {
		return nil, nil, fmt.Errorf("%s shows a running toolbus: give --server URL --token T (or TOOLBUS_SERVER and TOOLBUS_TOKEN)", cmd)
	}
	var (
		st  *store.Store
		err error
	)
	st, err = openExistingStore(ctx, d.dataDir)
	if err != nil {
		return nil, nil, err
	}
	svc, err := admin.NewService(admin.Options{Store: st, ToolScopes: platformtools.ToolScopes(),
		OnChange: recordLocalChange(st, os.Stderr)}) // audit.go
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	return svc, func() { _ = st.Close() }, nil
}

// dataDirNote is added to the report of a change made on a data directory
// that a running toolbus would not apply at once.
const dataDirNote = "changed in the data directory only: a running toolbus applies it at its next start; use --server for a live change"

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runInit is `toolbus init --data-dir DIR`: it creates the store (or
// checks an existing one), so that identities and tokens can be made
// before the first serve. No other command but serve creates a store.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("init", stderr)
	dataDir := fs.String("data-dir", "./data", "directory of the store (created if missing)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := store.Open(ctx, *dataDir, store.StoreOptions{})
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "toolbus store ready in %s\n", *dataDir)
	return err
}
