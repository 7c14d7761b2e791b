package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/store"
)

const aclExportHelp = `usage: toolbus acl export [--format mosquitto|nats] --data-dir DIR --out OUTDIR

Writes OUTDIR/passwords (Mosquitto 2 password_file: username:$7$... PBKDF2-SHA512
hashes, the same the embedded broker verifies), OUTDIR/acl (acl_file) and
OUTDIR/toolbus.conf (the settings toolbus needs: set_tcp_nodelay true, no
anonymous logins, the two files) from the store, so that an external Mosquitto
knows the same identities and rules. Add "include_dir OUTDIR" to mosquitto.conf.
The rules:

  platform      write ff/v2/mcp/+/+/+/+/+/+/+/req, read ff/v2/mcp/+/+/+/+/+/+/+/res,
                read ff/v2/mcp/+/+/status
  expert-agent  read ff/v2/mcp/<its username>/+/+/+/+/+/+/req,
                write ff/v2/mcp/<its username>/+/+/+/+/+/+/res,
                write ff/v2/mcp/<its username>/+/status
  every role    readwrite ff/v2/probe/<its username>/+, and the operator rules
                that name it or everyone

Disabled identities are left out (they cannot log in). Export again after every
change, and send Mosquitto SIGHUP to reload the files.

It reads the store itself (--data-dir, or --store-url), on the machine that holds
it: it takes no --server, because the password hashes it writes never leave the
store through the admin API.

Mosquitto is wider than the embedded broker's policy: "+" matches any level (the
embedded broker only [A-Za-z0-9_-]{1,128}); a platform identity may subscribe to
replies with any wildcards and through $share; an agent instance may reply or
announce as another instance of its own agent (never as another agent). See
docs/external-broker.md.

--format nats writes OUTDIR/toolbus-accounts.conf instead, for every node of a
NATS cluster to include in nats.conf ("include toolbus-accounts.conf", a path
relative to nats.conf's directory): an
account with JetStream and one user per identity, with the same permissions as
NATS subjects, and the bcrypt hash the store keeps beside each password (NATS
verifies no other kind; an identity whose password was set before toolbus kept
one is left out until "toolbus mqtt-user passwd" sets it again). Reload the
nodes after each export (nats-server --signal reload). See docs/distributed.md.

flags:
`

// runACLExport is `toolbus acl export` (args after "export").
func runACLExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("acl export", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, aclExportHelp)
		fs.PrintDefaults()
	}
	format := fs.String("format", "mosquitto", "output format: mosquitto or nats")
	dataDir := fs.String("data-dir", "./data", "directory of the store")
	storeURL := fs.String("store-url", "", "a shared PostgreSQL store (postgres://...) instead of --data-dir")
	out := fs.String("out", "", "directory to write acl and passwords into (created if missing)")
	server := fs.String("server", "", "not taken: the password hashes never leave the store through the admin API (use --data-dir or --store-url)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *server != "" {
		return errors.New("acl export: --server is not taken: the password hashes it writes never leave the store through the admin API; " +
			"run it with --data-dir (or --store-url) where the store is")
	}
	if *format != "mosquitto" && *format != "nats" {
		return fmt.Errorf("acl export: --format %q: want mosquitto or nats", *format)
	}
	if *out == "" {
		return errors.New("acl export: --out is required")
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return fmt.Errorf("acl export: --out: %w", err)
	}
	if *format == "mosquitto" && strings.ContainsFunc(dir, unicode.IsSpace) {
		// Mosquitto splits its configuration lines at spaces.
		return fmt.Errorf("acl export: --out %q: Mosquitto cannot read a path with whitespace", dir)
	}
	var st *store.Store
	if *storeURL != "" {
		st, err = store.OpenURL(ctx, *storeURL, store.StoreOptions{})
	} else {
		st, err = openExistingStore(ctx, *dataDir)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	ids, err := st.ListIdentities(ctx)
	if err != nil {
		return err
	}
	rules, err := st.ListRules(ctx)
	if err != nil {
		return err
	}
	if *format == "nats" {
		return exportNATS(ctx, st, ids, rules, dir, stdout, stderr)
	}
	hashes, err := st.PasswordHashes(ctx)
	if err != nil {
		return err
	}
	files := acl.MosquittoExport(ids, hashes, rules)
	for _, s := range files.Skipped {
		fmt.Fprintln(stderr, "toolbus: acl export: left out:", s)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	// The password file holds hashes: readable by its owner only (Mosquitto
	// runs as that owner, or reads it before dropping privileges).
	written := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{"passwords", files.Passwords, 0o600},
		{"acl", files.ACL, 0o644},
		{acl.MosquittoConfName, acl.MosquittoConf(dir), 0o644},
	}
	for _, f := range written {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote passwords, acl and %s in %s; mosquitto.conf needs: include_dir %s\n", acl.MosquittoConfName, dir, dir)
	return nil
}

// exportNATS writes the NATS accounts file into dir.
func exportNATS(ctx context.Context, st *store.Store, ids []acl.Identity, rules []acl.Rule, dir string, stdout, stderr io.Writer) error {
	hashes, err := st.BcryptHashes(ctx)
	if err != nil {
		return err
	}
	files := acl.NATSExport(ids, hashes, rules)
	for _, s := range files.Skipped {
		fmt.Fprintln(stderr, "toolbus: acl export: left out:", s)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	// It holds the password hashes: readable by its owner only.
	if err := writeFileAtomic(filepath.Join(dir, acl.NATSConfName), files.Conf, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s in %s; each node's nats.conf needs: include %s (a path relative to nats.conf's directory)\n", acl.NATSConfName, dir, acl.NATSConfName)
	return nil
}

// writeFileAtomic replaces path with data through a rename, so that a
// Mosquitto reloading meanwhile reads the old file or the new one, whole.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing is there
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("acl export: write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("acl export: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("acl export: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	return nil
}
