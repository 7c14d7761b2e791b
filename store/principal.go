package store

import "context"

// principalKey is the context key of the request's principal. An unexported
// type, so no other package can set or read it except through these calls.
type principalKey struct{}

type principal struct {
	tok    Token
	secret string
}

// WithToken returns ctx carrying the authenticated token of a request and
// its secret. The gateway's auth middleware sets it; handlers and platform
// tools read it with TokenFrom (the secret is forwarded on injected
// requests, so that the platform's own checks apply).
func WithToken(ctx context.Context, t Token, secret string) context.Context {
	return context.WithValue(ctx, principalKey{}, &principal{tok: t, secret: secret})
}

// TokenFrom returns the token and secret WithToken put in ctx; ok is false
// when the request was not authenticated.
func TokenFrom(ctx context.Context) (t Token, secret string, ok bool) {
	p, ok := ctx.Value(principalKey{}).(*principal)
	if !ok {
		return Token{}, "", false
	}
	return p.tok, p.secret, true
}
