package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/store"
)

// oauthClientDoor is what `oauth-client` asks of the door: both doors
// (*admin.Client and *admin.Service) have it.
type oauthClientDoor interface {
	OAuthClients(ctx context.Context) ([]admin.OAuthClient, error)
	DeleteOAuthClient(ctx context.Context, id string) (admin.DeletedOAuthClient, error)
}

var (
	_ oauthClientDoor = (*admin.Client)(nil)
	_ oauthClientDoor = (*admin.Service)(nil)
)

// runOAuthClient manages the OAuth clients registered through Dynamic
// Client Registration, through the admin API of a running toolbus
// (--server URL --token T) or on the store itself (--data-dir DIR or
// --store-url URL):
//
//	toolbus oauth-client list   [--json]
//	toolbus oauth-client delete ID   (its grants, codes and tokens go with it)
func runOAuthClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const subs = "list or delete"
	if len(args) == 0 {
		return errors.New("oauth-client: want " + subs)
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("oauth-client "+sub, stderr)
	d := addDoorFlags(fs, sub == "list")
	var id string
	switch sub {
	case "list":
	case "delete":
		// Positional, before the door's flags: toolbus oauth-client delete tbc_… --data-dir ./data
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			id, args = args[0], args[1:]
		}
		fs.Usage = func() {
			fmt.Fprint(fs.Output(), "usage: toolbus oauth-client delete ID [flags]\n\n"+
				"Deletes the registered OAuth client ID (the ID column of `oauth-client list`) with its grants,\n"+
				"authorization codes and tokens: its tokens are refused from then on. It may register again.\n\n")
			fs.PrintDefaults()
		}
	default:
		return fmt.Errorf("oauth-client: unknown subcommand %q (want %s)", sub, subs)
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if sub == "delete" && id == "" {
		return errors.New("oauth-client delete: want `toolbus oauth-client delete ID` (the ID column of `oauth-client list`)")
	}
	dr, closeDoor, err := d.open(ctx, "oauth-client "+sub, existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	od, ok := dr.(oauthClientDoor)
	if !ok { // both doors have it (the assertions above): not reached
		return fmt.Errorf("oauth-client %s: this door cannot manage OAuth clients", sub)
	}
	if sub == "list" {
		cls, err := od.OAuthClients(ctx)
		if err != nil {
			return err
		}
		if d.json {
			return printJSON(stdout, cls)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		// NAME last: it is the client's own text and may hold spaces.
		fmt.Fprintln(tw, "ID\tKIND\tREGISTERED\tFIRST-USED\tLAST-USED\tGRANTS\tTOKENS\tREDIRECT-URIS\tNAME")
		for _, c := range cls {
			kind := "public"
			if c.Confidential {
				kind = "confidential"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", c.ID, kind, formatOptTime(&c.Registered, "-"),
				formatOptTime(c.FirstUsed, "never"), formatOptTime(c.LastUsed, "never"), c.Grants, c.Tokens,
				orElse(strings.Join(c.RedirectURIs, ","), "-"), orElse(c.Name, "-"))
		}
		return tw.Flush()
	}
	del, err := od.DeleteOAuthClient(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted OAuth client %s with %d grants, %d authorization codes and %d tokens\n", del.ID, del.Grants, del.Codes, del.Tokens)
	if !d.remote() {
		_, err = fmt.Fprintf(stdout, "a running toolbus on this store refuses its tokens within %s\n", store.DefaultTokenCacheTTL)
	}
	return err
}
