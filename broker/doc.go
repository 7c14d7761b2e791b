// Package broker is toolbus's embedded MQTT broker: mochi-mqtt/server/v2
// behind toolbus's own default-deny authentication and ACL hook, with the
// in-process InlineBus through which the gateway talks to expert agents
// without a network hop.
//
// Every client logs in with a username and password that an Authenticator
// (the store, package store) checks; everything a client publishes or subscribes to, and
// every message the broker delivers to it, is checked by an Authorizer (the
// policy, package acl) against the identity it logged in as. Whatever the Authorizer
// does not allow is denied. The inline client is the gateway itself and is
// not checked.
//
// What mochi does not check, this package does: a Last Will is checked when
// the client connects (mochi publishes Wills without an ACL check), and
// retained messages on request/response topics are refused (mochi would keep
// them and replay them to every new subscriber).
package broker
