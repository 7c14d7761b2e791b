package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus/acl"
)

func runMQTTUser(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("mqtt-user: want add, list or remove")
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("mqtt-user "+sub, stderr)
	dataDir := fs.String("data-dir", "./data", "directory of the store")
	var username, role *string
	var genPassword *bool
	switch sub {
	case "add":
		username = fs.String("username", "", "MQTT username (letters, digits, _ and -)")
		role = fs.String("role", "", "role: expert-agent, platform or client")
		genPassword = fs.Bool("generate-password", false, "generate a password and print it instead of reading stdin")
	case "remove":
		username = fs.String("username", "", "MQTT username")
	case "list":
	default:
		return fmt.Errorf("mqtt-user: unknown subcommand %q (want add, list or remove)", sub)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	store, err := acl.Open(ctx, *dataDir, acl.StoreOptions{})
	if err != nil {
		return err
	}
	defer store.Close()

	switch sub {
	case "add":
		r, err := acl.ParseRole(*role)
		if err != nil {
			return fmt.Errorf("--role: %w", err)
		}
		password, generated, err := readPassword(stdin, *genPassword)
		if err != nil {
			return err
		}
		if _, err := store.AddIdentity(ctx, *username, r, password); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added MQTT identity %s (role %s)\n", *username, r)
		if generated {
			fmt.Fprintf(stdout, "password (shown once):\n%s\n", password)
		}
	case "remove":
		if err := store.RemoveIdentity(ctx, *username); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed MQTT identity %s\n", *username)
	case "list":
		ids, err := store.ListIdentities(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USERNAME\tROLE\tDISABLED\tCREATED")
		for _, id := range ids {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\n", id.Username, id.Role, id.Disabled, id.Created.UTC().Format("2006-01-02T15:04:05Z"))
		}
		return tw.Flush()
	}
	return nil
}

// readPassword takes the password from stdin (one line, when stdin is not a
// terminal) or generates one when asked to or when stdin is a terminal.
func readPassword(stdin io.Reader, generate bool) (pw []byte, generated bool, err error) {
	if !generate && !isTerminal(stdin) {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, fmt.Errorf("read password from stdin: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			if len(line) < 12 {
				return nil, false, errors.New("password from stdin: at least 12 characters")
			}
			return []byte(line), false, nil
		}
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, false, err
	}
	return []byte(base64.RawURLEncoding.EncodeToString(b)), true, nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
