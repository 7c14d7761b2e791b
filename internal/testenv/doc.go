// Package testenv holds helpers for toolbus's tests: a logger that writes
// to the test log, a context and a polling loop bound to the test, a paho
// connection the test can cut, and the embedded MQTT broker over a real
// ACL store with a platform and an expert-agent identity.
//
// It is an ordinary package (it imports testing) so that the tests of
// several packages can share it; only tests may import it.
package testenv
