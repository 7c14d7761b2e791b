// Package console is the operator console: server-rendered pages under
// /console/ on the gateway's own listener that show the bus to the people
// who run it (the agents online, their instances and tools, the broker).
//
// It is a trust boundary. Only sign-in users with the admin role get in
// (their password is checked by the store's VerifyUser, as on the OAuth
// sign-in page); sessions live in this process, behind an HttpOnly,
// SameSite=Strict cookie (Secure and __Host- under HTTPS), with idle and
// absolute expiry, and end when the user is removed, loses the role or
// changes password. Sign-in attempts are limited per client address
// (internal/netsrc.ClientKey, behind trusted proxies) and per user name
// (internal/ratelimit, the OAuth sign-in's limit): past it, 429 with
// Retry-After. Audit records name the client's address the same way.
// Every state change goes through
// http.CrossOriginProtection; every answer carries a strict
// Content-Security-Policy (no inline script or style) and refuses frames.
// Everything an agent sends is rendered by html/template as text.
//
// The console reads the admin model (package admin): nothing it shows is
// missing from the admin API.
package console
