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
//	toolbus user add    --user ID [--generate-password] [--admin]  (password on stdin, or generated and printed)
//	toolbus user list   [--json]
//	toolbus user passwd --user ID [--generate-password]
//	toolbus user admin  ID on|off                                    (the admin role: the console)
//	toolbus user remove --user ID                                    (revokes every token of theirs)
func runUser(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	const subs = "add, list, passwd, admin or remove"
	if len(args) == 0 {
		return errors.New("user: want " + subs)
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("user "+sub, stderr)
	d := addDoorFlags(fs, sub == "list")
	var user *string
	var genPassword, isAdmin *bool
	var adminOn bool
	switch sub {
	case "add", "passwd":
		user = fs.String("user", "", "user ID (letters, digits, _ and -): the user of the tokens they consent to")
		genPassword = fs.Bool("generate-password", false, "generate a password and print it instead of reading stdin")
		if sub == "add" {
			isAdmin = fs.Bool("admin", false, "give the user the admin role: they may sign in to the console (/console/)")
		}
	case "remove":
		user = fs.String("user", "", "user ID")
	case "admin":
		// Positional, before the door's flags: toolbus user admin alice on --data-dir ./data
		if len(args) >= 2 && (args[1] == "on" || args[1] == "off") {
			user, adminOn = &args[0], args[1] == "on"
			args = args[2:]
		}
	case "list":
	default:
		return fmt.Errorf("user: unknown subcommand %q (want %s)", sub, subs)
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if sub == "admin" && user == nil {
		return errors.New("user admin: want `toolbus user admin ID on|off`")
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
		fmt.Fprintln(tw, "USER\tADMIN\tCREATED")
		for _, u := range users {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", u.ID, yesNo(u.Admin), u.Created.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "add":
		password, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if ch, err = dr.AddUser(ctx, admin.UserRequest{User: *user, Password: password, Admin: *isAdmin}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added user %s: they can sign in to OAuth clients now\n", *user)
		if *isAdmin {
			fmt.Fprintf(stdout, "user %s has the admin role: they can sign in to the console (/console/)\n", *user)
		}
	case "passwd":
		password, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if ch, err = dr.SetUserPassword(ctx, *user, admin.PasswordRequest{Password: password}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "changed the password of user %s (their tokens stay valid: revoke them to end their sessions)\n", *user)
	case "admin":
		if ch, err = dr.SetUserAdmin(ctx, *user, admin.UserAdminRequest{Admin: adminOn}); err != nil {
			return err
		}
		if adminOn {
			fmt.Fprintf(stdout, "user %s has the admin role: they can sign in to the console (/console/)\n", *user)
		} else {
			fmt.Fprintf(stdout, "user %s no longer has the admin role; their console sessions end at their next request\n", *user)
		}
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

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
