package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// runToken manages personal access tokens, through the admin API of a
// running toolbus (--server URL --token T) or on the store itself (a data
// directory, or a PostgreSQL --store-url):
//
//	toolbus token create [--server URL --token T | --store-url URL | --data-dir DIR] --user USER [--scopes a,b] [--read-only] [--entity TYPE/ID]... [--agents a,b] [--ttl 720h] [--name N]
//	toolbus token list   [--server URL --token T | --store-url URL | --data-dir DIR] [--user U] [--json]
//	toolbus token revoke [--server URL --token T | --store-url URL | --data-dir DIR] --id ID
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("token: want create, list or revoke")
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create":
		return tokenCreate(ctx, rest, stdout, stderr)
	case "list":
		return tokenList(ctx, rest, stdout, stderr)
	case "revoke":
		return tokenRevoke(ctx, rest, stdout, stderr)
	default:
		return fmt.Errorf("token: unknown subcommand %q (want create, list or revoke)", sub)
	}
}

func tokenCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token create", stderr)
	d := addDoorFlags(fs, false)
	user := fs.String("user", "", "user who owns the token (letters, digits, _ and -)")
	scopes := fs.String("scopes", "", "comma-separated scopes, of "+strings.Join(append(slices.Clone(store.BuiltinScopes), platformtools.ToolScopes()...), ", ")+
		" (default "+strings.Join(store.DefaultScopes, ",")+")")
	readOnly := fs.Bool("read-only", false, "allow only tools annotated readOnlyHint: true")
	var entities entityList
	fs.Var(&entities, "entity", "narrow the token to entity TYPE/ID (repeat, or separate with commas; default: any entity)")
	agents := fs.String("agents", "", "comma-separated expert agents (their MQTT usernames) whose tools the token may list and call (default: every agent; platform tools follow --scopes)")
	ttl := fs.Duration("ttl", 0, "lifetime, e.g. 720h (default: never expires)")
	name := fs.String("name", "", "a note for operators")
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("token create: --user is required")
	}
	req := admin.TokenRequest{User: *user, ReadOnly: *readOnly, Entities: entities, Agents: splitList(*agents), Name: *name}
	if *ttl != 0 {
		req.TTL = ttl.String()
	}
	var err error
	if req.Scopes, err = parseScopes(*scopes); err != nil {
		return err
	}
	dr, closeDoor, err := d.open(ctx, "token create", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	created, err := dr.CreateToken(ctx, req)
	if err != nil {
		return err
	}
	tok := created.Token
	fmt.Fprintf(stdout, "created token %s for user %s\n", tok.ID, tok.User)
	fmt.Fprintf(stdout, "  scopes:    %s\n", strings.Join(tok.Scopes, ","))
	fmt.Fprintf(stdout, "  read-only: %t\n", tok.ReadOnly)
	fmt.Fprintf(stdout, "  entities:  %s\n", formatEntities(tok.Entities))
	fmt.Fprintf(stdout, "  agents:    %s\n", formatAgents(tok.Agents))
	fmt.Fprintf(stdout, "  expires:   %s\n", formatOptTime(tok.ExpiresAt, "never"))
	if tok.Name != "" {
		fmt.Fprintf(stdout, "  name:      %s\n", tok.Name)
	}
	// The secret alone on the last line, so that scripts can take it with tail -n1.
	fmt.Fprintln(stdout, "token (shown once; it cannot be recovered, only revoked):")
	_, err = fmt.Fprintln(stdout, created.Secret)
	return err
}

func tokenList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token list", stderr)
	d := addDoorFlags(fs, true)
	user := fs.String("user", "", "only the tokens of this user (default: every user)")
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	dr, closeDoor, err := d.open(ctx, "token list", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	toks, err := dr.ListTokens(ctx, *user)
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, toks)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// NAME last: it is free text and may hold spaces. AUDIENCE and CLIENT
	// are set on tokens an OAuth consent minted (docs/oauth.md), "-" on
	// personal ones.
	fmt.Fprintln(tw, "ID\tUSER\tSCOPES\tREAD-ONLY\tENTITIES\tAGENTS\tEXPIRES\tLAST-USED\tREVOKED\tAUDIENCE\tCLIENT\tNAME")
	for _, t := range toks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.User, strings.Join(t.Scopes, ","), t.ReadOnly,
			formatEntities(t.Entities), formatAgents(t.Agents), formatOptTime(t.ExpiresAt, "never"), formatOptTime(t.LastUsed, "never"),
			formatOptTime(t.RevokedAt, "-"), orElse(t.Audience, "-"), orElse(t.Client, "-"), orElse(t.Name, "-"))
	}
	return tw.Flush()
}

func tokenRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token revoke", stderr)
	d := addDoorFlags(fs, false)
	id := fs.String("id", "", "ID of the token (its visible prefix, as 'token list' shows it), or the whole token")
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("token revoke: --id is required")
	}
	if tokenID := store.TokenIDOf(*id); tokenID != "" {
		*id = tokenID // the whole token was given: its ID is its prefix
	}
	dr, closeDoor, err := d.open(ctx, "token revoke", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	if err := dr.RevokeToken(ctx, *id); err != nil {
		return err
	}
	if d.remote() {
		_, err = fmt.Fprintf(stdout, "revoked token %s\n", *id)
		return err
	}
	_, err = fmt.Fprintf(stdout, "revoked token %s (a running toolbus on this store refuses it within %s)\n",
		*id, store.DefaultTokenCacheTTL)
	return err
}

// openExistingStore opens the store in dataDir without creating one: listing
// or revoking in a mistyped directory should fail, not leave an empty store.
func openExistingStore(ctx context.Context, dataDir string) (*store.Store, error) {
	if _, err := os.Stat(filepath.Join(dataDir, store.DBFileName)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// A mistyped --data-dir must not leave a new, empty store behind.
			return nil, fmt.Errorf("no toolbus store in %s (check --data-dir; `toolbus init --data-dir %s` creates one)", dataDir, dataDir)
		}
		return nil, err
	}
	return store.Open(ctx, dataDir, store.StoreOptions{})
}

// parseScopes reads --scopes: "" means the defaults (nil).
func parseScopes(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if err := store.ValidateScope(p); err != nil {
			return nil, fmt.Errorf("--scopes: %w", err)
		}
		parts[i] = p
	}
	return parts, nil
}

// entityList is the repeatable --entity flag. A value may also hold several
// entities separated by commas, so that TOOLBUS_ENTITY can carry a list.
type entityList []store.Entity

func (l *entityList) String() string {
	if l == nil {
		return ""
	}
	return formatEntities(*l)
}

func (l *entityList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		e, err := store.ParseEntity(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*l = append(*l, e)
	}
	return nil
}

// formatAgents is a token's agent limit as the CLI prints it.
func formatAgents(agents []string) string {
	if len(agents) == 0 {
		return "any"
	}
	return strings.Join(agents, ",")
}

func formatEntities(es []store.Entity) string {
	if len(es) == 0 {
		return "any"
	}
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

func formatOptTime(t *time.Time, zero string) string {
	if t == nil || t.IsZero() {
		return zero
	}
	return t.UTC().Format(time.RFC3339)
}

func orElse(s, empty string) string {
	if s == "" {
		return empty
	}
	return s
}
