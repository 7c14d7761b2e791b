package gateway

import (
	"net/http"

	"github.com/toolbus/toolbus/store"
)

// ServeAs returns the MCP endpoint for an in-process caller that acts as
// tok without its secret: the console's Tools page asks it for tools/list
// as a chosen user or token sees it. It skips the bearer check and the
// per-token and per-user rate limits (there is no client to limit);
// everything after them (grants, scopes, read-only, the catalog, the
// observers) is the path a client's request takes. A platform tool that
// calls the API with the caller's secret cannot run through it: call
// tools with a real token through ServeHTTP.
func (g *Gateway) ServeAs(tok store.Token) http.Handler {
	return g.withRequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serveMCP(w, r.WithContext(store.WithToken(r.Context(), tok, "")))
	}))
}
