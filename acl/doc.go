// Package acl decides who may do what: the MQTT identities that log in to the
// broker (with their roles and password hashes), the topic rules that say which
// identity may publish or subscribe where, the personal access tokens that
// callers of the MCP endpoint present (scopes, read-only, entity narrowing),
// and the validation of topic levels that every part of toolbus uses before
// it builds a topic.
//
// The data lives in a Store (SQLite in the data directory by default). The
// broker asks a Policy, built from the store, whether a client may touch a
// topic; the Policy denies everything no rule allows. The topic tree of the
// MQTT contract (v2, under ff/v2/) is granted by role only, so that the
// broker itself vouches for which agent and instance a reply or presence
// comes from; the retired v1 tree (ff/v1/mcp/) is refused to everyone.
package acl
