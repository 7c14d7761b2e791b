package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/admin"
)

// runUser manages the people who sign in on the OAuth authorization page,
// through the admin API of a running toolbus (--server URL --token T) or
// on the store itself (--data-dir DIR or --store-url URL):
//
//	toolbus user add    --user ID [--generate-password]  (password on stdin, or generated and printed)
//	toolbus user list   [--json]
//	toolbus user passwd --user ID [--generate-password]
//	toolbus user remove --user ID                         (revokes every token of theirs)
func runUser(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	const subs = "add, list, passwd or remove"
	if len(args) == 0 {
		return errors.New("user: want " + subs)
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("user "+sub, stderr)
	d := addDoorFlags(fs, sub == "list")
	var user *string
	var genPassword *bool
	switch sub {
	case "add", "passwd":
		user = fs.String("user", "", "user ID (letters, digits, _ and -): the user of the tokens they consent to")
		genPassword = fs.Bool("generate-password", false, "generate a password and print it instead of reading stdin")
	case "remove":
		user = fs.String("user", "", "user ID")
	case "list":
	default:
		return fmt.Errorf("user: unknown subcommand %q (want %s)", sub, subs)
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if user != nil && *user == "" {
		return fmt.Errorf("user %s: --user is required", sub)
	}
	dr, closeDoor, err := d.open(ctx, "user "+sub, existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()

	var ch admin.UserChange
	switch sub {
	case "list":
		users, err := dr.ListUsers(ctx)
		if err != nil {
			return err
		}
		if d.json {
			return printJSON(stdout, users)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USER\tCREATED")
		for _, u := range users {
			fmt.Fprintf(tw, "%s\t%s\n", u.ID, u.Created.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "add":
		password, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if ch, err = dr.AddUser(ctx, admin.UserRequest{User: *user, Password: password}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added user %s: they can sign in to OAuth clients now\n", *user)
	case "passwd":
		password, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if ch, err = dr.SetUserPassword(ctx, *user, admin.PasswordRequest{Password: password}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "changed the password of user %s (their tokens stay valid: revoke them to end their sessions)\n", *user)
	case "remove":
		if ch, err = dr.RemoveUser(ctx, *user); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed user %s and revoked %d token(s) of theirs\n", *user, ch.TokensRevoked)
	}
	if ch.Password != "" {
		// Alone on the last line, for scripts (tail -n1).
		fmt.Fprintf(stdout, "password (shown once):\n%s\n", ch.Password)
	}
	return nil
}
