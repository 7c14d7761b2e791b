package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus/admin"
)

// runACL manages topic ACL rules, through the admin API of a running
// toolbus (--server URL --token T; a change is in force on its broker at
// once) or on a data directory (in force at the next start):
//
//	toolbus acl rule list   [--json]
//	toolbus acl rule add    (--username NAME | --everyone) --access read|write|readwrite --filter FILTER
//	toolbus acl rule remove --id ID
func runACL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "rule" {
		return errors.New("acl: want 'acl rule list|add|remove' or 'acl export'")
	}
	args = args[1:]
	if len(args) == 0 {
		return errors.New("acl rule: want list, add or remove")
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("acl rule "+sub, stderr)
	d := addDoorFlags(fs, sub == "list")
	var (
		username, access, filter, id *string
		everyone                     *bool
	)
	how := existingStore
	switch sub {
	case "list":
	case "add":
		username = fs.String("username", "", "the identity the rule applies to")
		everyone = fs.Bool("everyone", false, "the rule applies to every identity (instead of --username)")
		access = fs.String("access", "", "read (subscribe), write (publish) or readwrite")
		filter = fs.String("filter", "", "MQTT topic filter, may hold + and # (not under ff/v2/ or ff/v1/mcp/, not $...)")
	case "remove":
		id = fs.String("id", "", "ID of the rule, as 'acl rule list' shows it")
	default:
		return fmt.Errorf("acl rule: unknown subcommand %q (want list, add or remove)", sub)
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	switch {
	case sub == "add" && (*username == "") == !*everyone:
		return errors.New("acl rule add: give --username NAME or --everyone")
	case sub == "add" && (*access == "" || *filter == ""):
		return errors.New("acl rule add: --access and --filter are required")
	case sub == "remove" && *id == "":
		return errors.New("acl rule remove: --id is required")
	}
	dr, closeDoor, err := d.open(ctx, "acl rule "+sub, how)
	if err != nil {
		return err
	}
	defer closeDoor()

	note := ""
	if !d.remote() {
		note = " (" + dataDirNote + ")"
	}
	switch sub {
	case "list":
		rules, err := dr.ListRules(ctx)
		if err != nil {
			return err
		}
		if d.json {
			return printJSON(stdout, rules)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tWHO\tACCESS\tFILTER\tNOTE")
		for _, r := range rules {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, ruleWho(r), r.Access, r.Filter, ruleNote(r))
		}
		return tw.Flush()
	case "add":
		r, err := dr.AddRule(ctx, admin.RuleRequest{Username: *username, Access: *access, Filter: *filter})
		if err != nil {
			return err
		}
		if _, err = fmt.Fprintf(stdout, "added rule %s: %s %s %s%s\n", r.ID, ruleWho(r), r.Access, r.Filter, note); err != nil {
			return err
		}
	default: // remove
		if err := dr.RemoveRule(ctx, *id); err != nil {
			return err
		}
		if _, err = fmt.Fprintf(stdout, "removed rule %s%s\n", *id, note); err != nil {
			return err
		}
	}
	exportDue(ctx, dr, d, stderr) // mqttuser.go
	return nil
}

// ruleWho is the WHO column: role:R for a built-in rule, * for every
// identity, else the username.
func ruleWho(r admin.Rule) string {
	switch {
	case r.Builtin:
		return "role:" + r.Role
	case r.Username == "":
		return "*"
	}
	return r.Username
}

func ruleNote(r admin.Rule) string {
	if r.Builtin {
		return "built-in, read-only: " + r.Description
	}
	if r.Created != nil {
		return "added " + formatOptTime(r.Created, "")
	}
	return strings.TrimSpace(r.Description)
}
