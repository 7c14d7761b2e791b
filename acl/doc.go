// Package acl decides who may do what: the MQTT identities that log in to the
// broker (with their roles and password hashes), the topic rules that say which
// identity may publish or subscribe where, the personal access tokens that
// callers of the MCP endpoint present (scopes, read-only, entity narrowing),
// and the validation of topic levels that every part of toolbus uses before
// it builds a topic.
//
// The data lives in a Store (SQLite in the data directory by default). The
// broker asks a Policy, built from the store, whether a client may touch a
// topic; the Policy denies everything no rule allows.
package acl
