package acl

import (
	"bytes"
	"fmt"
	"path/filepath"
)

// The built-in rules in Mosquitto's acl_file syntax. Mosquitto's "+"
// matches any level, so these are wider than the Policy's (see
// MosquittoExport). An agent's and every identity's own topics name the
// username, so they are written in each user's section.
const (
	mosqRequests = mcpPrefix + "+/+/+/+/+/+/+/req"
	mosqReplies  = mcpPrefix + "+/+/+/+/+/+/+/res"
	mosqPresence = mcpPrefix + "+/+/status"
)

// MosquittoFiles are the files `toolbus acl export --format mosquitto`
// writes: Mosquitto 2's password_file and acl_file (and MosquittoConf's
// settings beside them).
type MosquittoFiles struct {
	// Passwords has one "username:$7$..." line per exported identity.
	Passwords []byte
	// ACL grants each exported identity its role's built-in rules and the
	// operator rules that name it or everyone.
	ACL []byte
	// Skipped says what was left out and why, one line each (disabled
	// identities are not listed: leaving them out is the point).
	Skipped []string
}

// MosquittoExport turns identities, their password hashes (username ->
// "$7$..." hash, as store.Store.PasswordHashes returns them) and the operator
// rules into files that make a Mosquitto 2 broker enforce what Policy
// enforces in the embedded broker, as closely as Mosquitto's acl_file
// allows. It is a pure function: same input, same bytes.
//
// Left out: disabled identities, identities without a hash or whose name is
// not a valid level, rules that fail Rule.Validate or whose filter Mosquitto
// cannot read back (whitespace, control characters), and rules of identities
// that are not exported. Every omission but the first is in Skipped.
//
// Where Mosquitto is wider than the Policy (docs/external-broker.md):
//   - "+" matches any level, not only ^[A-Za-z0-9_-]{1,128}$;
//   - a platform may subscribe to ff/v2/mcp/+/+/+/+/+/+/+/res and
//     ff/v2/mcp/+/+/status with wildcards in any level, not only to one
//     context's reply filter and the Policy's three presence filters, and
//     may use $share (Mosquitto checks the filter without its
//     $share/<group>/ prefix);
//   - an expert agent may read its agent's requests for any instance, and
//     reply or announce its presence as any instance of its own agent (never
//     as another agent): tying the instance level to the client ID would
//     take a %c pattern, and patterns apply to every user;
//   - an expert agent may share its requests in any $share group, not only
//     the one named after it.
//
// No acl_file patterns are written at all: Mosquitto applies a pattern to
// every user, so one with %u would let a client identity act as an agent
// under its own name. Each identity's section names its username literally
// instead (a valid level, so safe in a topic), and operator rules for
// everyone are repeated in each section, so that a '%' in a filter is never
// taken for a pattern substitution.
func MosquittoExport(ids []Identity, hashes map[string]string, rules []Rule) MosquittoFiles {
	var out MosquittoFiles
	sel := selectExport(ids, func(id Identity) string {
		if _, err := parseHash(hashes[id.Username]); err != nil {
			return "no usable password hash"
		}
		return ""
	}, rules, func(r Rule) string {
		if !mosquittoSafeFilter(r.Filter) {
			return fmt.Sprintf("filter %q has whitespace or control characters, which an acl_file cannot hold", r.Filter)
		}
		return ""
	})
	users, global, byUser := sel.users, sel.global, sel.byUser
	out.Skipped = sel.skipped

	var pw bytes.Buffer
	for _, id := range users {
		fmt.Fprintf(&pw, "%s:%s\n", id.Username, hashes[id.Username])
	}
	out.Passwords = pw.Bytes()

	var b bytes.Buffer
	b.WriteString("# Mosquitto 2 acl_file written by `toolbus acl export --format mosquitto`.\n")
	b.WriteString("# Export it again after changing identities or rules, then reload Mosquitto (SIGHUP).\n")
	b.WriteString("# Mosquitto is wider than toolbus's own policy in places: see docs/external-broker.md.\n")
	b.WriteString("# No patterns: Mosquitto applies them to every user, whatever its role.\n")
	for _, id := range users {
		fmt.Fprintf(&b, "\nuser %s\n", id.Username)
		switch id.Role {
		case RolePlatform:
			b.WriteString("# role platform: requests out, replies and presence in\n")
			fmt.Fprintf(&b, "topic write %s\n", mosqRequests)
			fmt.Fprintf(&b, "topic read %s\n", mosqReplies)
			fmt.Fprintf(&b, "topic read %s\n", mosqPresence)
		case RoleExpertAgent:
			b.WriteString("# role expert-agent: its own requests in, replies and presence out under its\n")
			b.WriteString("# name (any instance of it: Mosquitto cannot tie that level to the client ID)\n")
			fmt.Fprintf(&b, "topic read %s%s/+/+/+/+/+/+/req\n", mcpPrefix, id.Username)
			fmt.Fprintf(&b, "topic write %s%s/+/+/+/+/+/+/res\n", mcpPrefix, id.Username)
			fmt.Fprintf(&b, "topic write %s%s/+/status\n", mcpPrefix, id.Username)
		default:
			fmt.Fprintf(&b, "# role %s: no requests, replies or presence\n", id.Role)
		}
		b.WriteString("# every role: its own probe topics (a gateway measures its round trip there)\n")
		fmt.Fprintf(&b, "topic readwrite %s\n", ProbeTopic(id.Username, "+"))
		for _, r := range byUser[id.Username] {
			fmt.Fprintf(&b, "topic %s %s\n", r.Access, r.Filter)
		}
		for _, r := range global {
			fmt.Fprintf(&b, "topic %s %s\n", r.Access, r.Filter)
		}
	}
	out.ACL = b.Bytes()
	return out
}

// MosquittoConfName is the name of the settings file MosquittoConf writes,
// beside the password and ACL files: Mosquitto's include_dir reads every
// *.conf file of a directory.
const MosquittoConfName = "toolbus.conf"

// MosquittoConf returns the mosquitto.conf settings toolbus needs, naming
// the password and ACL files in dir (an absolute path), for the broker to
// read through "include_dir <dir>". It sets no listener: the operator's
// own mosquitto.conf chooses ports, TLS and persistence.
func MosquittoConf(dir string) []byte {
	var b bytes.Buffer
	b.WriteString("# Mosquitto 2 settings for toolbus, written by `toolbus acl export --format mosquitto`.\n")
	fmt.Fprintf(&b, "# Read it with \"include_dir %s\" in mosquitto.conf; docs/external-broker.md\n", dir)
	b.WriteString("# says why each line is here. The settings are global: keep per_listener_settings false.\n\n")
	b.WriteString("# Send each MQTT packet at once. Without it, Nagle's algorithm holds a reply\n")
	b.WriteString("# back until the gateway acknowledges the broker's previous packet (its\n")
	b.WriteString("# delayed ACK, 40 ms on Linux): each sequential tool call waits that long.\n")
	b.WriteString("set_tcp_nodelay true\n\n")
	b.WriteString("# Every client logs in with an identity from the toolbus store.\n")
	b.WriteString("allow_anonymous false\n")
	fmt.Fprintf(&b, "password_file %s\n", filepath.Join(dir, "passwords"))
	fmt.Fprintf(&b, "acl_file %s\n", filepath.Join(dir, "acl"))
	return b.Bytes()
}

// mosquittoSafeFilter reports whether f survives Mosquitto's acl_file
// parser: it reads a line, trims trailing whitespace and splits on spaces,
// so a filter with whitespace or control characters would come back as
// another filter, or as another line.
func mosquittoSafeFilter(f string) bool {
	for i := 0; i < len(f); i++ {
		if c := f[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
