// Package store is toolbus's database: everything the gateway keeps, in
// SQLite in the data directory (Open) or in a PostgreSQL database that
// several gateways share (OpenURL).
//
// It keeps the MQTT identities with their password hashes ("$7$" for the
// broker and Mosquitto, bcrypt for NATS) and authenticates MQTT logins
// against them; the operator's topic rules; personal access tokens, their
// scopes and their authentication on every request; sign-in users and the
// agents each may use; the OAuth authorization server's clients, codes and
// grants; the audit log; and the MCP sessions that have ended. Writes that
// fail because the database cannot be written say so (ErrStoreReadOnly,
// ErrStoreFull).
//
// What the stored data means for the broker is package acl's: the store
// returns identities and rules as acl.Identity and acl.Rule, and the broker
// enforces an acl.Policy built from them. Only the gateway's side imports
// this package; an expert agent never does.
package store
