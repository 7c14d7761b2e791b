package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/acl"
)

// runToken manages personal access tokens:
//
//	toolbus token create --data-dir DIR --user USER [--scopes a,b] [--read-only] [--entity TYPE/ID]... [--ttl 720h] [--name N]
//	toolbus token list   --data-dir DIR [--user U] [--json]
//	toolbus token revoke --data-dir DIR --id ID
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
	dataDir := fs.String("data-dir", "./data", "directory of the store")
	user := fs.String("user", "", "user who owns the token (letters, digits, _ and -)")
	scopes := fs.String("scopes", "", "comma-separated scopes (default "+strings.Join(acl.DefaultScopes, ",")+")")
	readOnly := fs.Bool("read-only", false, "allow only tools annotated readOnlyHint: true")
	var entities entityList
	fs.Var(&entities, "entity", "narrow the token to entity TYPE/ID (repeat, or separate with commas; default: any entity)")
	ttl := fs.Duration("ttl", 0, "lifetime, e.g. 720h (default: never expires)")
	name := fs.String("name", "", "a note for operators")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("token create: --user is required")
	}
	spec := acl.TokenSpec{UserID: *user, ReadOnly: *readOnly, Entities: entities, TTL: *ttl, Name: *name}
	var err error
	if spec.Scopes, err = parseScopes(*scopes); err != nil {
		return err
	}

	store, err := acl.Open(ctx, *dataDir, acl.StoreOptions{})
	if err != nil {
		return err
	}
	defer store.Close()
	secret, tok, err := store.CreateToken(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created token %s for user %s\n", tok.ID, tok.UserID)
	fmt.Fprintf(stdout, "  scopes:    %s\n", strings.Join(tok.Scopes, ","))
	fmt.Fprintf(stdout, "  read-only: %t\n", tok.ReadOnly)
	fmt.Fprintf(stdout, "  entities:  %s\n", formatEntities(tok.Entities))
	fmt.Fprintf(stdout, "  expires:   %s\n", formatTime(tok.ExpiresAt, "never"))
	if tok.Name != "" {
		fmt.Fprintf(stdout, "  name:      %s\n", tok.Name)
	}
	// The secret alone on the last line, so that scripts can take it with tail -n1.
	fmt.Fprintln(stdout, "token (shown once; it cannot be recovered, only revoked):")
	_, err = fmt.Fprintln(stdout, secret)
	return err
}

func tokenList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token list", stderr)
	dataDir := fs.String("data-dir", "./data", "directory of the store")
	user := fs.String("user", "", "only the tokens of this user (default: every user)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	store, err := openExistingStore(ctx, *dataDir)
	if err != nil {
		return err
	}
	defer store.Close()
	toks, err := store.ListTokens(ctx, *user)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]tokenJSON, len(toks))
		for i, t := range toks {
			out[i] = newTokenJSON(t)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// NAME last: it is free text and may hold spaces.
	fmt.Fprintln(tw, "ID\tUSER\tSCOPES\tREAD-ONLY\tENTITIES\tEXPIRES\tLAST-USED\tREVOKED\tNAME")
	for _, t := range toks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.UserID, strings.Join(t.Scopes, ","), t.ReadOnly,
			formatEntities(t.Entities), formatTime(t.ExpiresAt, "never"), formatTime(t.LastUsed, "never"),
			formatTime(t.RevokedAt, "-"), orElse(t.Name, "-"))
	}
	return tw.Flush()
}

func tokenRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token revoke", stderr)
	dataDir := fs.String("data-dir", "./data", "directory of the store")
	id := fs.String("id", "", "ID of the token (its visible prefix, as 'token list' shows it)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("token revoke: --id is required")
	}
	store, err := openExistingStore(ctx, *dataDir)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.RevokeToken(ctx, *id); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "revoked token %s (a running toolbus on this data directory refuses it within %s)\n",
		*id, acl.DefaultTokenCacheTTL)
	return err
}

// openExistingStore opens the store in dataDir without creating one: listing
// or revoking in a mistyped directory should fail, not leave an empty store.
func openExistingStore(ctx context.Context, dataDir string) (*acl.Store, error) {
	if _, err := os.Stat(filepath.Join(dataDir, acl.DBFileName)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no toolbus store in %s (check --data-dir)", dataDir)
		}
		return nil, err
	}
	return acl.Open(ctx, dataDir, acl.StoreOptions{})
}

// parseScopes reads --scopes: "" means the defaults (nil).
func parseScopes(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if err := acl.ValidateScope(p); err != nil {
			return nil, fmt.Errorf("--scopes: %w", err)
		}
		parts[i] = p
	}
	return parts, nil
}

// entityList is the repeatable --entity flag. A value may also hold several
// entities separated by commas, so that TOOLBUS_ENTITY can carry a list.
type entityList []acl.Entity

func (l *entityList) String() string {
	if l == nil {
		return ""
	}
	return formatEntities(*l)
}

func (l *entityList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		e, err := acl.ParseEntity(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*l = append(*l, e)
	}
	return nil
}

func formatEntities(es []acl.Entity) string {
	if len(es) == 0 {
		return "any"
	}
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

func formatTime(t time.Time, zero string) string {
	if t.IsZero() {
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

// tokenJSON is one token of `toolbus token list --json`. Times are RFC 3339
// in UTC; an unset time is left out.
type tokenJSON struct {
	ID        string       `json:"id"`
	User      string       `json:"user"`
	Scopes    []string     `json:"scopes"`
	ReadOnly  bool         `json:"readOnly"`
	Entities  []acl.Entity `json:"entities"` // [] = any entity
	Name      string       `json:"name,omitempty"`
	Created   time.Time    `json:"created"`
	ExpiresAt *time.Time   `json:"expiresAt,omitempty"`
	LastUsed  *time.Time   `json:"lastUsed,omitempty"`
	RevokedAt *time.Time   `json:"revokedAt,omitempty"`
}

func newTokenJSON(t acl.Token) tokenJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	j := tokenJSON{
		ID: t.ID, User: t.UserID, Scopes: t.Scopes, ReadOnly: t.ReadOnly, Entities: t.Entities, Name: t.Name,
		Created: t.Created.UTC(), ExpiresAt: opt(t.ExpiresAt), LastUsed: opt(t.LastUsed), RevokedAt: opt(t.RevokedAt),
	}
	if j.Entities == nil {
		j.Entities = []acl.Entity{}
	}
	if j.Scopes == nil {
		j.Scopes = []string{}
	}
	return j
}
