package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// door is the operators' model as the CLI reaches it: through the admin API
// of a running toolbus (*admin.Client) or directly on the store, in a data
// directory or at a PostgreSQL URL (*admin.Service over the store). Both return the same types, so every
// command prints the same whichever door it used.
type door interface {
	ListTokens(ctx context.Context, user string) ([]admin.Token, error)
	CreateToken(ctx context.Context, req admin.TokenRequest) (admin.CreatedToken, error)
	RevokeToken(ctx context.Context, id string) error

	ListUserAgents(ctx context.Context) ([]admin.UserAgents, error)
	SetUserAgents(ctx context.Context, user string, req admin.UserAgentsRequest) (admin.UserAgents, error)
	AgentLimits(ctx context.Context) ([]admin.AgentLimit, error)
	SetAgentLimit(ctx context.Context, agent string, req admin.AgentLimitRequest) (admin.AgentLimit, error)

	ListUsers(ctx context.Context) ([]admin.User, error)
	AddUser(ctx context.Context, req admin.UserRequest) (admin.UserChange, error)
	SetUserPassword(ctx context.Context, user string, req admin.PasswordRequest) (admin.UserChange, error)
	RemoveUser(ctx context.Context, user string) (admin.UserChange, error)
	SetUserAdmin(ctx context.Context, user string, req admin.UserAdminRequest) (admin.UserChange, error)

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
// commands: --server, or the store itself (--store-url or --data-dir).
type doorFlags struct {
	server, token     string
	dataDir, storeURL string
	json              bool
}

func addDoorFlags(fs *flag.FlagSet, withJSON bool) *doorFlags {
	d := &doorFlags{}
	fs.StringVar(&d.server, "server", "", "URL of a running toolbus (e.g. http://127.0.0.1:8080): work through its admin API")
	fs.StringVar(&d.token, "token", "", "token with the admin scope, for --server")
	addStoreFlags(fs, &d.dataDir, &d.storeURL, "directory of the store (SQLite), when neither --server nor --store-url is given")
	if withJSON {
		fs.BoolVar(&d.json, "json", false, "print JSON instead of a table")
	}
	return d
}

// addStoreFlags adds --data-dir and --store-url, the two names of a store
// that a command opens itself; pickStore chooses between them once parsed.
func addStoreFlags(fs *flag.FlagSet, dataDir, storeURL *string, dataDirUsage string) {
	fs.StringVar(dataDir, "data-dir", "./data", dataDirUsage)
	fs.StringVar(storeURL, "store-url", "", "a shared PostgreSQL store, postgres://user:password@host:port/db, instead of --data-dir "+
		"(prefer TOOLBUS_STORE_URL: a flag shows in ps; see docs/scale-out.md)")
}

// parseDoorFlags parses args like parseFlags, then keeps one door
// (pickStore).
func parseDoorFlags(fs *flag.FlagSet, d *doorFlags, args []string) error {
	src, err := parseCommandFlags(fs, args)
	if err != nil {
		return err
	}
	return pickStore(src, &d.server, &d.storeURL)
}

// pickStore leaves one way to the store set: the one the command line
// names among --server, --store-url and --data-dir, whatever the
// environment sets for the others (an operator's TOOLBUS_STORE_URL, exported
// for serve, must not redirect `token list --data-dir ./data`); with none
// on the command line, TOOLBUS_SERVER before TOOLBUS_STORE_URL before
// --data-dir (TOOLBUS_DATA_DIR, or ./data). The data directory is the door
// when *server and *storeURL are left empty. server is nil for a command
// without --server (init).
func pickStore(src flagSources, server, storeURL *string) error {
	var given []string
	for _, name := range []string{"server", "store-url", "data-dir"} {
		if src[name] == "flag" {
			given = append(given, "--"+name)
		}
	}
	if len(given) > 1 {
		return fmt.Errorf("%s: each names the store; give one", strings.Join(given, " and "))
	}
	var pick string
	switch {
	case len(given) == 1:
		pick = given[0]
	case server != nil && *server != "":
		pick = "--server"
	case *storeURL != "":
		pick = "--store-url"
	}
	if pick == "--store-url" && *storeURL == "" {
		// "$TOOLBUS_STORE_URL" in a shell that has not set it.
		return errors.New("--store-url is empty: give the URL of the PostgreSQL store (postgres://...), or set TOOLBUS_STORE_URL")
	}
	if pick != "--server" && server != nil {
		*server = ""
	}
	if pick != "--store-url" {
		*storeURL = ""
	}
	return nil
}

// remote reports whether the command works through a server.
func (d *doorFlags) remote() bool { return d.server != "" }

// doorOpen says how the store door opens the store.
type doorOpen int

const (
	existingStore doorOpen = iota // fail if there is none: only serve and init create a store
	serverOnly                    // no store door (clients, agents, contexts)
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
	st, err := openStoreOf(ctx, d.dataDir, d.storeURL)
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

// openStoreOf opens the store of storeURL (PostgreSQL), or else the one in
// dataDir, which must exist (openExistingStore). A PostgreSQL database must
// exist too (the operator creates it); the store makes its tables in it
// if they are missing, as `toolbus init --store-url` does.
func openStoreOf(ctx context.Context, dataDir, storeURL string) (*store.Store, error) {
	if storeURL == "" {
		return openExistingStore(ctx, dataDir)
	}
	st, err := store.OpenURL(ctx, storeURL, store.StoreOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w (check --store-url or TOOLBUS_STORE_URL)", err)
	}
	return st, nil
}

// dataDirNote is added to the report of a change made on the store itself
// (--data-dir or --store-url) that a running toolbus would not apply at once.
const dataDirNote = "changed in the store only: a running toolbus applies it at its next start; use --server for a live change"

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runInit is `toolbus init --data-dir DIR` (or --store-url URL): it
// creates the store (or checks an existing one), so that identities and
// tokens can be made before the first serve. No other command but serve
// creates a store in a data directory.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("init", stderr)
	var dataDir, storeURL string
	addStoreFlags(fs, &dataDir, &storeURL, "directory of the store (created if missing), when no --store-url is given")
	src, err := parseCommandFlags(fs, args)
	if err != nil {
		return err
	}
	if err := pickStore(src, nil, &storeURL); err != nil {
		return err
	}
	var st *store.Store
	where := dataDir
	if storeURL != "" {
		where = store.RedactURL(storeURL)
		if st, err = store.OpenURL(ctx, storeURL, store.StoreOptions{}); err != nil {
			return fmt.Errorf("%w (check --store-url or TOOLBUS_STORE_URL; the database must exist: createdb)", err)
		}
	} else if st, err = store.Open(ctx, dataDir, store.StoreOptions{}); err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "toolbus store ready in %s\n", where)
	return err
}
