package store

import (
	"context"
	"testing"
)

func TestPrincipal(t *testing.T) {
	if tok, secret, ok := TokenFrom(context.Background()); ok || tok.ID != "" || secret != "" {
		t.Fatalf("TokenFrom(empty context) = %+v, %q, %v", tok, secret, ok)
	}
	want := Token{ID: "tb_3kq9x2m1", UserID: "alice", Scopes: []string{ScopeToolsList}}
	ctx := WithToken(t.Context(), want, "tb_3kq9x2m1_secret")
	ctx = context.WithValue(ctx, struct{ other int }{}, "unrelated") // survives other values
	tok, secret, ok := TokenFrom(ctx)
	if !ok || !tokensEqual(tok, want) || secret != "tb_3kq9x2m1_secret" {
		t.Fatalf("TokenFrom = %+v, %q, %v", tok, secret, ok)
	}
	// A later WithToken (e.g. a narrower principal) replaces the earlier one.
	inner := WithToken(ctx, Token{ID: "tb_00000000", UserID: "bob"}, "s2")
	if tok, secret, _ := TokenFrom(inner); tok.UserID != "bob" || secret != "s2" {
		t.Fatalf("inner TokenFrom = %+v, %q", tok, secret)
	}
	if tok, _, _ := TokenFrom(ctx); tok.UserID != "alice" {
		t.Fatalf("outer context changed: %+v", tok)
	}
}
