package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
)

// runMQTTUser manages MQTT identities, through the admin API of a running
// toolbus (--server URL --token T; disabling or removing an identity then
// disconnects its clients at once) or on a data directory:
//
//	toolbus mqtt-user add     --username NAME --role ROLE [--generate-password]  (password on stdin, or generated and printed)
//	toolbus mqtt-user list    [--json]
//	toolbus mqtt-user disable|enable|remove --username NAME
//	toolbus mqtt-user passwd  --username NAME [--generate-password] [--disconnect]
func runMQTTUser(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	const subs = "add, list, disable, enable, passwd or remove"
	if len(args) == 0 {
		return errors.New("mqtt-user: want " + subs)
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("mqtt-user "+sub, stderr)
	d := addDoorFlags(fs, sub == "list")
	var username, role *string
	var genPassword, disconnect *bool
	switch sub {
	case "add":
		username = fs.String("username", "", "MQTT username (letters, digits, _ and -)")
		role = fs.String("role", "", "role: expert-agent, platform or client")
		genPassword = fs.Bool("generate-password", false, "generate a password and print it instead of reading stdin")
	case "passwd":
		username = fs.String("username", "", "MQTT username")
		genPassword = fs.Bool("generate-password", false, "generate a password and print it instead of reading stdin")
		disconnect = fs.Bool("disconnect", false, "disconnect the identity's clients now (with --server)")
	case "remove", "disable", "enable":
		username = fs.String("username", "", "MQTT username")
	case "list":
	default:
		return fmt.Errorf("mqtt-user: unknown subcommand %q (want %s)", sub, subs)
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if username != nil && *username == "" {
		return fmt.Errorf("mqtt-user %s: --username is required", sub)
	}
	dr, closeDoor, err := d.open(ctx, "mqtt-user "+sub, existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()

	var ch admin.IdentityChange
	switch sub {
	case "list":
		ids, err := dr.ListIdentities(ctx)
		if err != nil {
			return err
		}
		if d.json {
			return printJSON(stdout, ids)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USERNAME\tROLE\tDISABLED\tCREATED")
		for _, id := range ids {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\n", id.Username, id.Role, id.Disabled, id.Created.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "add":
		r, err := acl.ParseRole(*role)
		if err != nil {
			return fmt.Errorf("--role: %w", err)
		}
		password, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if ch, err = dr.AddIdentity(ctx, admin.IdentityRequest{Username: *username, Role: r, Password: password}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added MQTT identity %s (role %s)\n", *username, r)
	case "passwd":
		password, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if ch, err = dr.SetPassword(ctx, *username, admin.PasswordRequest{Password: password, Disconnect: *disconnect}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "changed the password of MQTT identity %s%s\n", *username, disconnectNote(ch, *disconnect, d.remote()))
	case "disable", "enable":
		if ch, err = dr.SetDisabled(ctx, *username, sub == "disable"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%sd MQTT identity %s%s\n", sub, *username, disconnectNote(ch, sub == "disable", d.remote()))
	case "remove":
		if ch, err = dr.RemoveIdentity(ctx, *username); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed MQTT identity %s and its ACL rules%s\n", *username, disconnectNote(ch, true, d.remote()))
	}
	if ch.Password != "" {
		// Alone on the last line, for scripts (tail -n1).
		fmt.Fprintf(stdout, "password (shown once):\n%s\n", ch.Password)
	}
	// disconnectNote has said it already for a remote disable or remove.
	saidExport := d.remote() && !ch.Live && (sub == "disable" || sub == "remove")
	if !ch.Live && !saidExport {
		exportDue(ctx, dr, d, stderr)
	}
	return nil
}

// exportDue says on stderr that an export and a broker reload are due when
// the store holds an enabled identity of role platform. Only a gateway on
// an external broker logs in with one (the embedded broker's gateway needs
// none), and an external broker knows only what the last export wrote.
// It says nothing when the identities cannot be listed: the change itself
// has been made.
func exportDue(ctx context.Context, dr door, d *doorFlags, stderr io.Writer) {
	ids, err := dr.ListIdentities(ctx)
	if err != nil {
		return
	}
	var platform []string
	for _, id := range ids {
		if id.Role == acl.RolePlatform && !id.Disabled {
			platform = append(platform, id.Username)
		}
	}
	if len(platform) == 0 {
		return
	}
	where := "--data-dir " + d.dataDir
	switch {
	case d.remote():
		where = "--data-dir DIR (or --store-url), where the store is,"
	case d.storeURL != "":
		where = `--store-url "$TOOLBUS_STORE_URL"`
	}
	fmt.Fprintf(stderr, "toolbus: the store has an identity of role platform (%s), so its gateways use an external broker, "+
		"which knows nothing of this change until you export again and reload it:\n"+
		"  toolbus acl export %s --out DIR   (DIR: the directory the broker's configuration includes; --format nats for NATS)\n"+
		"  then reload the broker: Mosquitto: kill -HUP <its pid> (systemctl reload mosquitto); NATS: nats-server --signal reload\n",
		strings.Join(platform, ", "), where)
}

// disconnectNote says what happened to the identity's connected clients:
// remote is --server, whose gateway may run no embedded broker.
func disconnectNote(ch admin.IdentityChange, disconnecting, remote bool) string {
	switch {
	case !disconnecting:
		return ""
	case ch.Live:
		return fmt.Sprintf("; disconnected %d client(s)", ch.Disconnected)
	case remote:
		return "; the gateway's broker is external and knows nothing of it yet: run toolbus acl export where the store is, " +
			"then reload the broker (Mosquitto: SIGHUP), and disconnect the clients there"
	default:
		return "; new logins follow at once, but clients connected now stay (no embedded broker was told: use --server for a live change)"
	}
}

// errNoPassword is readPassword's error for an empty stdin: a password is
// generated only when asked for, never because a pipe happened to be empty.
var errNoPassword = errors.New("no password on stdin: pipe one in (one line), or pass --generate-password")

// readPassword takes the password from stdin (one line, when stdin is not a
// terminal), or returns "" (generate one) when asked to or when stdin is a
// terminal. An empty stdin is errNoPassword.
func readPassword(stdin io.Reader, generate bool) (string, error) {
	if generate || isTerminal(stdin) {
		return "", nil
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errNoPassword
	}
	if len(line) < admin.MinPasswordLen {
		return "", fmt.Errorf("password from stdin: at least %d characters", admin.MinPasswordLen)
	}
	return line, nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
