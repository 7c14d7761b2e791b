// Package acl is toolbus's access-control policy for the MQTT broker: who
// may publish or subscribe where, and how that is written for a broker that
// is not ours.
//
// It holds the kinds of identity (Role), an identity as the policy sees it
// (Identity: username, role, disabled), the operator's topic rules (Rule,
// Access) and the Policy the embedded broker asks on every publish and
// subscribe; the exports that make Mosquitto (MosquittoExport) or a NATS
// cluster (NATSExport) enforce the same as closely as they can; and
// Mosquitto's "$7$" password hash, which those exports carry. The topic tree
// of the MQTT contract (v2, under ff/v2/) is granted by role only, so that
// the broker itself vouches for which agent and instance a reply or presence
// comes from; the retired v1 tree (ff/v1/mcp/) is refused to everyone; the
// Policy denies whatever no rule allows.
//
// Nothing here is stored: package store keeps the identities, their
// password hashes and the rules, and returns them as this package's types.
// Topic levels are validated by package contract, which agents import too.
package acl
