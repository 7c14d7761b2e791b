package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
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

A file that exists keeps its owner and mode (the broker, running as its own user,
must still read it after the reload); a new one is the exporter's, passwords mode
0600. --owner USER[:GROUP] gives every file written that owner. When a running
mosquitto (or nats-server) could not read a file written, the export says so.

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
	var dataDir, storeURL string
	addStoreFlags(fs, &dataDir, &storeURL, "directory of the store")
	out := fs.String("out", "", "directory to write acl and passwords into (created if missing)")
	ownerFlag := fs.String("owner", "", "USER[:GROUP] (names or numbers) to own the files written; default: an existing file's owner, else whoever runs the export")
	server := fs.String("server", "", "not taken: the password hashes never leave the store through the admin API (use --data-dir or --store-url)")
	src, err := parseCommandFlags(fs, args)
	if err != nil {
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
	if err := pickStore(src, nil, &storeURL); err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	owner, err := parseOwner(*ownerFlag)
	if err != nil {
		return fmt.Errorf("acl export: --owner %q: %w", *ownerFlag, err)
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return fmt.Errorf("acl export: --out: %w", err)
	}
	if *format == "mosquitto" && strings.ContainsFunc(dir, unicode.IsSpace) {
		// Mosquitto splits its configuration lines at spaces.
		return fmt.Errorf("acl export: --out %q: Mosquitto cannot read a path with whitespace", dir)
	}
	st, err := openStoreOf(ctx, dataDir, storeURL)
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
		return exportNATS(ctx, st, ids, rules, dir, owner, stdout, stderr)
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
	// The password file holds hashes: a new one is readable by its owner
	// only; one that exists keeps the owner and mode the operator gave it
	// for the broker's user (writeExportFile).
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
		if err := writeExportFile(filepath.Join(dir, f.name), f.data, f.perm, owner, "mosquitto", stderr); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote passwords, acl and %s in %s; mosquitto.conf needs: include_dir %s\n", acl.MosquittoConfName, dir, dir)
	return nil
}

// exportNATS writes the NATS accounts file into dir.
func exportNATS(ctx context.Context, st *store.Store, ids []acl.Identity, rules []acl.Rule, dir string, owner *acl.FileOwner, stdout, stderr io.Writer) error {
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
	if err := writeExportFile(filepath.Join(dir, acl.NATSConfName), files.Conf, 0o600, owner, "nats-server", stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s in %s; each node's nats.conf needs: include %s (a path relative to nats.conf's directory)\n", acl.NATSConfName, dir, acl.NATSConfName)
	return nil
}

// writeExportFile writes one file of the export (acl.WriteExportFile:
// atomically, keeping an existing file's owner and mode), then warns when a
// running broker process named broker could not read it.
func writeExportFile(path string, data []byte, perm os.FileMode, owner *acl.FileOwner, broker string, stderr io.Writer) error {
	if err := acl.WriteExportFile(path, data, perm, owner); err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("acl export: %w", err)
	}
	o, ok := acl.OwnerOf(fi)
	if !ok {
		return nil
	}
	for _, p := range brokerProcesses(procRoot, broker) {
		if !acl.ReadableBy(o, fi.Mode().Perm(), p.uid, p.gids) {
			fmt.Fprintf(stderr, "toolbus: acl export: warning: %s (pid %d) runs as %s, which cannot read %s (owner %s, mode %#o): "+
				"after its next reload it refuses every login; give the file to that user (chown %s %s), or export with --owner %s\n",
				broker, p.pid, userName(p.uid), path, userName(o.UID), fi.Mode().Perm(), userName(p.uid), path, userName(p.uid))
		}
	}
	return nil
}

// procRoot is where brokerProcesses looks for running processes (Linux's
// procfs; elsewhere it finds none, and the export warns of nothing).
const procRoot = "/proc"

// brokerProcess is a running broker: its pid, effective user and groups.
type brokerProcess struct {
	pid  int
	uid  int
	gids []int
}

// brokerProcesses lists the processes named name under root (a procfs),
// with the user and groups they run as. It reads what it can and skips
// the rest: a process may end while it looks.
func brokerProcesses(root, name string) []brokerProcess {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []brokerProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join(root, e.Name(), "status"))
		if err != nil {
			continue
		}
		p, ok := parseProcStatus(status, name)
		if ok {
			p.pid = pid
			out = append(out, p)
		}
	}
	return out
}

// parseProcStatus reads a /proc/<pid>/status: the process's effective
// user and group (the second number of Uid: and Gid:) and its
// supplementary groups, if its Name: is name.
func parseProcStatus(status []byte, name string) (brokerProcess, bool) {
	var p brokerProcess
	var named, hasUID bool
	for line := range strings.Lines(string(status)) {
		key, value, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found {
			continue
		}
		fields := strings.Fields(value)
		switch key {
		case "Name":
			named = len(fields) == 1 && fields[0] == name
		case "Uid", "Gid":
			if len(fields) < 2 {
				return p, false
			}
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				return p, false
			}
			if key == "Uid" {
				p.uid, hasUID = n, true
			} else {
				p.gids = append(p.gids, n)
			}
		case "Groups":
			for _, f := range fields {
				if n, err := strconv.Atoi(f); err == nil {
					p.gids = append(p.gids, n)
				}
			}
		}
	}
	return p, named && hasUID
}

// parseOwner reads --owner: USER[:GROUP], each a name or a number; a USER
// alone brings its primary group. "" is no owner (nil).
func parseOwner(s string) (*acl.FileOwner, error) {
	if s == "" {
		return nil, nil
	}
	name, group, hasGroup := strings.Cut(s, ":")
	var o acl.FileOwner
	if uid, err := strconv.Atoi(name); err == nil {
		o.UID, o.GID = uid, -1
		if u, err := user.LookupId(name); err == nil {
			o.GID, _ = strconv.Atoi(u.Gid)
		}
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("no such user: give a user name or number")
		}
		o.UID, _ = strconv.Atoi(u.Uid)
		o.GID, _ = strconv.Atoi(u.Gid)
	}
	if hasGroup {
		if gid, err := strconv.Atoi(group); err == nil {
			o.GID = gid
		} else if g, err := user.LookupGroup(group); err == nil {
			o.GID, _ = strconv.Atoi(g.Gid)
		} else {
			return nil, fmt.Errorf("no such group %q: give a group name or number", group)
		}
	}
	return &o, nil
}

// userName is uid's name, or its number when it has none.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
