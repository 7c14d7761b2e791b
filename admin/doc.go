// Package admin is the operators' model of a toolbus process: tokens, MQTT
// identities, topic ACL rules, and what runs (MQTT clients, expert agents,
// cached contexts). One Service holds the model; two doors reach it:
//
//   - Handler serves it as REST under /api/v1/admin/ to tokens with the
//     admin scope (docs/admin-api.md);
//   - Client calls that REST API, and a Service built on a bare store (no
//     broker, no requester) works on a data directory directly.
//
// Both doors return the same types, so `toolbus` prints the same output
// whichever it used. Every change goes through Service.change, the one
// place where an audit record can be taken (Options.OnChange).
package admin
