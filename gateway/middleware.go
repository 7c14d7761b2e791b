package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

type ctxKey int

const ctxRequestID ctxKey = iota

// logger returns a logger with the ID and caller of the request of ctx. It
// is built only when something is logged: the hot path logs nothing, and a
// logrus field map per request would cost more than the rest of the
// middleware together.
func (g *Gateway) logger(ctx context.Context) *logrus.Entry {
	f := logrus.Fields{}
	if id, ok := ctx.Value(ctxRequestID).(string); ok {
		f["requestId"] = id
	}
	if tok, _, ok := store.TokenFrom(ctx); ok {
		f["user"], f["token"] = tok.UserID, tok.ID
	}
	return g.log.WithFields(f)
}

// requestIDOf is the request ID withRequestID gave the request.
func requestIDOf(ctx context.Context) string {
	id, _ := ctx.Value(ctxRequestID).(string)
	return id
}

// withRequestID gives every request an ID (the client's X-Request-Id if it
// is sane, else a new one) and echoes it.
func (g *Gateway) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if len(id) > 64 || !contract.ValidLevel(id) {
			id = g.nextRequestID()
		}
		w.Header()["X-Request-Id"] = []string{id}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxRequestID, id)))
	})
}

// nextRequestID returns a process-unique request ID: a random prefix per
// process and a counter (unique, cheap; not a secret).
func (g *Gateway) nextRequestID() string {
	n := g.requestSeq.Add(1)
	b := make([]byte, 0, len(g.requestPrefix)+17)
	b = append(b, g.requestPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, n, 36)
	return string(b)
}

// checkOrigin refuses requests that a browser page of a foreign site could
// make (DNS rebinding, cross-site POSTs): a Host that is not allowed, or an
// Origin whose host is not allowed. Requests without Origin come from
// non-browser clients and pass.
func (g *Gateway) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.refuse(w, r, http.StatusForbidden, "forbidden_host", "Host "+quote(r.Host)+" is not served here")
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !g.originAllowed(o) {
			g.refuse(w, r, http.StatusForbidden, "forbidden_origin", "Origin "+quote(o)+" is not allowed")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return "\"" + s + "\""
}

func (g *Gateway) hostAllowed(hostport string) bool {
	if len(g.opts.AllowedHosts) == 0 {
		return true
	}
	host := hostOnly(hostport)
	for _, h := range g.opts.AllowedHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

func (g *Gateway) originAllowed(origin string) bool {
	for _, o := range g.opts.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	// A page served by an allowed host may call the endpoint.
	return len(g.opts.AllowedHosts) > 0 && g.hostAllowed(u.Host)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(hostport, "[]")
}

// LoopbackHosts are the Host values of a gateway that listens on loopback only.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// authenticate checks the bearer token before anything else runs and puts
// the token in the request context (store.WithToken).
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			g.unauthenticated(w, r, false, "missing bearer token (Authorization: Bearer <token>)")
			return
		}
		tok, err := g.opts.Tokens.AuthenticateToken(r.Context(), secret)
		if err != nil {
			if errors.Is(err, store.ErrUnauthenticated) {
				g.unauthenticated(w, r, true, err.Error())
				return
			}
			g.logger(r.Context()).WithError(err).Error("token check failed")
			g.refuse(w, r, http.StatusServiceUnavailable, "unavailable", "the token store is not available; try again")
			return
		}
		// A platform tool's call into the API carries the token of the MCP
		// request that already passed here: no audience check, no limit.
		injected := platformtools.Injected(r.Context())
		// A token issued to an OAuth client is for one resource (RFC 8707).
		if tok.Audience != "" && !injected && !g.forResource(r, tok.Audience) {
			g.unauthenticated(w, r, true, g.wrongAudience(r, tok.Audience))
			return
		}
		if !injected {
			limits := g.limits.Load()
			if ok, wait := limits.token.allow(tok.ID); !ok {
				g.rateLimited(w, r, "this token", wait)
				return
			}
			if ok, wait := limits.user.allow(tok.UserID); !ok {
				g.rateLimited(w, r, "this user", wait)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(store.WithToken(r.Context(), tok, secret)))
	})
}

// wrongAudience says why a token bound to audience is refused on r: the
// resource it was issued for, and the one it was used at, so that the
// client (or its user) sees which to ask a token for.
func (g *Gateway) wrongAudience(r *http.Request, audience string) string {
	here := "no MCP endpoint"
	if path, ok := resourcePath(r.URL.Path); ok && r.URL.Path != "" {
		here = g.publicBase(r) + path
	}
	return "the token was issued for the resource " + quote(audience) + ", not for " + here + " (RFC 8707): ask a token for this one"
}

// requireScope lets through only tokens holding one of scopes (403 otherwise).
func (g *Gateway) requireScope(next http.Handler, scopes ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _, _ := store.TokenFrom(r.Context())
		for _, s := range scopes {
			if tok.HasScope(s) {
				next.ServeHTTP(w, r)
				return
			}
		}
		g.refuse(w, r, http.StatusForbidden, "forbidden", "the token lacks the "+strings.Join(scopes, " or ")+" scope")
	})
}

func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// unauthenticated answers 401; invalidToken says a token was presented
// (and refused), not missing.
func (g *Gateway) unauthenticated(w http.ResponseWriter, r *http.Request, invalidToken bool, msg string) {
	w.Header().Set("WWW-Authenticate", g.challenge(r, invalidToken))
	g.refuse(w, r, http.StatusUnauthorized, "unauthenticated", msg)
}

// noteRefusal counts a refused request and tells the Observer.
func (g *Gateway) noteRefusal(r *http.Request, status int, reason string) {
	g.stats.refused(reason)
	if g.opts.Observer != nil {
		g.opts.Observer.Refused(r, status, reason)
	}
}

// refuse answers with the plain JSON error shape and counts the refusal.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	g.noteRefusal(r, status, code)
	g.logger(r.Context()).WithFields(logrus.Fields{"status": status, "reason": code}).Info("request refused")
	writeError(w, status, code, msg)
}
