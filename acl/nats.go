package acl

import (
	"bytes"
	"fmt"
	"strings"
)

// NATSConfName is the file `toolbus acl export --format nats` writes, for
// each node's nats.conf to include.
const NATSConfName = "toolbus-accounts.conf"

// NATSAccount is the NATS account the export puts every identity in: one
// account, so that gateways and agents see each other's messages.
const NATSAccount = "TOOLBUS"

// The built-in permissions as NATS subjects (MQTT's "/" is NATS's ".",
// "+" is "*"). Like Mosquitto's "+", NATS's "*" matches any token.
const (
	natsRequests = "ff.v2.mcp.*.*.*.*.*.*.*.req"
	natsReplies  = "ff.v2.mcp.*.*.*.*.*.*.*.res"
	natsPresence = "ff.v2.mcp.*.*.status"
)

// NATSFiles is what NATSExport writes.
type NATSFiles struct {
	// Conf is an accounts block for nats.conf: NATSAccount with JetStream
	// enabled (NATS keeps MQTT sessions and retained messages there) and
	// one user per exported identity, with its bcrypt hash and permissions.
	Conf []byte
	// Skipped says what was left out and why, one line each (disabled
	// identities are not listed: leaving them out is the point).
	Skipped []string
}

// NATSExport turns identities, their bcrypt hashes (store.Store.BcryptHashes:
// NATS verifies no other kind) and the operator rules into a NATS accounts
// block whose permissions give each identity what MosquittoExport gives it,
// as closely as NATS subjects allow. It is a pure function: same input,
// same bytes.
//
// Left out: disabled identities, identities without a bcrypt hash (their
// password was set before the store kept one: set it again) or whose name
// is not a valid level, rules that fail Rule.Validate or that no NATS
// subject can express (an empty level, a '.', '*', '>', '"', '\' or
// whitespace in the filter), and rules of identities that are not
// exported. Every omission but the first is in Skipped.
//
// Where NATS is wider than the Policy: what MosquittoExport says (any
// token for "+", an agent may reply or announce as any instance of its
// own agent), and an agent may subscribe to its pool's requests under
// $share/<username>/ as a literal subject (NATS has no shared
// subscriptions), so that an agent run without --exclusive starts.
func NATSExport(ids []Identity, bcryptHashes map[string]string, rules []Rule) NATSFiles {
	var out NATSFiles
	sel := selectExport(ids, func(id Identity) string {
		if !natsBcryptHash(bcryptHashes[id.Username]) {
			return "no bcrypt hash (its password was set before toolbus kept one, or is longer than bcrypt's 72 bytes): set it again with toolbus mqtt-user passwd"
		}
		return ""
	}, rules, func(r Rule) string {
		if _, err := natsSubjects(r.Filter); err != nil {
			return fmt.Sprintf("filter %q: %v", r.Filter, err)
		}
		return ""
	})
	out.Skipped = sel.skipped
	type perms struct{ pub, sub []string }
	add := func(p *perms, r Rule) {
		subjects, _ := natsSubjects(r.Filter) // unfit refused those it fails on
		if r.Access&AccessWrite != 0 {
			p.pub = append(p.pub, subjects...)
		}
		if r.Access&AccessRead != 0 {
			p.sub = append(p.sub, subjects...)
		}
	}
	var global perms
	for _, r := range sel.global {
		add(&global, r)
	}

	var b bytes.Buffer
	b.WriteString("# NATS accounts for toolbus, written by `toolbus acl export --format nats`.\n")
	b.WriteString("# Include it in every node's nats.conf (include " + NATSConfName + "), and export\n")
	b.WriteString("# again and reload every node (nats-server --signal reload) after changing\n")
	b.WriteString("# identities or rules. NATS is wider than toolbus's own policy in places:\n")
	b.WriteString("# see docs/distributed.md.\n")
	b.WriteString("accounts {\n  " + NATSAccount + " {\n")
	b.WriteString("    # NATS keeps MQTT sessions and retained messages (presence) in JetStream.\n")
	b.WriteString("    jetstream: enabled\n")
	b.WriteString("    users: [\n")
	for _, id := range sel.users {
		var p perms
		probe := "ff.v2.probe." + id.Username + ".*"
		switch id.Role {
		case RolePlatform:
			fmt.Fprintf(&b, "      # %s: role platform: requests out, replies and presence in\n", id.Username)
			p.pub = []string{natsRequests}
			p.sub = []string{natsReplies, natsPresence}
		case RoleExpertAgent:
			fmt.Fprintf(&b, "      # %s: role expert-agent: its own requests in, replies and presence out\n", id.Username)
			own := "ff.v2.mcp." + id.Username
			p.pub = []string{own + ".*.*.*.*.*.*.res", own + ".*.status"}
			p.sub = []string{own + ".*.*.*.*.*.*.req", "$share." + id.Username + "." + own + ".*.*.*.*.*.*.req"}
		default:
			fmt.Fprintf(&b, "      # %s: role %s: no requests, replies or presence\n", id.Username, id.Role)
		}
		p.pub, p.sub = append(p.pub, probe), append(p.sub, probe)
		for _, r := range sel.byUser[id.Username] {
			add(&p, r)
		}
		p.pub, p.sub = append(p.pub, global.pub...), append(p.sub, global.sub...)
		b.WriteString("      {\n")
		fmt.Fprintf(&b, "        user: %s\n", natsQuote(id.Username))
		fmt.Fprintf(&b, "        password: %s\n", natsQuote(bcryptHashes[id.Username]))
		b.WriteString("        permissions: {\n")
		fmt.Fprintf(&b, "          publish: { allow: %s }\n", natsList(p.pub))
		fmt.Fprintf(&b, "          subscribe: { allow: %s }\n", natsList(p.sub))
		b.WriteString("        }\n      }\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	out.Conf = b.Bytes()
	return out
}

// natsBcryptHash reports whether h looks like a bcrypt hash, which nats.conf
// takes for a password to verify rather than one to compare.
func natsBcryptHash(h string) bool {
	return strings.HasPrefix(h, "$2a$") || strings.HasPrefix(h, "$2b$") || strings.HasPrefix(h, "$2y$")
}

// natsSubjects converts an MQTT filter into the NATS subjects that match
// what it matches: "/" becomes ".", "+" "*", and a trailing "#" both the
// parent and ".>" (MQTT's "a/#" matches "a" too).
func natsSubjects(filter string) ([]string, error) {
	levels := strings.Split(filter, "/")
	for i, l := range levels {
		switch {
		case l == "":
			return nil, fmt.Errorf("an empty level, which a NATS subject cannot hold")
		case strings.ContainsFunc(l, func(r rune) bool {
			return r <= ' ' || r == 0x7f || strings.ContainsRune(`.*>"\`, r)
		}):
			return nil, fmt.Errorf("level %q: NATS subjects take no '.', '*', '>', '\"', '\\' or whitespace", l)
		case l == "+":
			levels[i] = "*"
		}
	}
	if levels[len(levels)-1] != "#" {
		return []string{strings.Join(levels, ".")}, nil
	}
	if len(levels) == 1 {
		return []string{">"}, nil
	}
	parent := strings.Join(levels[:len(levels)-1], ".")
	return []string{parent, parent + ".>"}, nil
}

// natsQuote quotes s for nats.conf; callers pass only strings without '"'
// or '\' (levels, bcrypt hashes, natsSubjects' output).
func natsQuote(s string) string { return `"` + s + `"` }

func natsList(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = natsQuote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
