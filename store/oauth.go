package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// The OAuth authorization server's state (package oauth speaks the
// protocol): registered clients, authorization codes and grants. A grant
// is what a consent leaves: a refresh token and the access token it last
// minted. Access tokens are ordinary tokens (with an Audience and a
// ClientID), so they show in ListTokens and RevokeToken ends them; a grant
// whose access token was revoked refreshes no more.

// ErrInvalidGrant is returned for an authorization code or refresh token
// that is unknown, expired, revoked, used before, or issued to another
// client (OAuth's invalid_grant). The error's text says which.
var ErrInvalidGrant = errors.New("invalid grant")

// ErrCodeReused is returned by RedeemOAuthCode for a code redeemed before;
// the grant its first redemption made is revoked (RFC 6749 section 4.1.2).
// It wraps ErrInvalidGrant.
var ErrCodeReused = fmt.Errorf("%w: authorization code used before; the tokens it gave are revoked", ErrInvalidGrant)

// OAuthClient is a client registered through Dynamic Client Registration.
type OAuthClient struct {
	ID           string
	Name         string
	RedirectURIs []string
	// Confidential clients have a secret and must present it at the token
	// endpoint; public ones (native and browser apps) prove themselves
	// with PKCE alone.
	Confidential bool
	Created      time.Time
	// Used is when a user first consented to the client (SaveOAuthCode);
	// zero if never (see PurgeUnusedOAuthClients).
	Used       time.Time
	secretHash string
}

// CheckSecret reports whether secret is the client's (constant time).
// A public client has none: any secret is wrong.
func (c OAuthClient) CheckSecret(secret string) bool {
	return c.Confidential && sameHash(sha256Hex(secret), c.secretHash)
}

// randomString returns n random bytes as unpadded base64url.
func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// randomID returns prefix and n random characters of idAlphabet.
func randomID(prefix string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	out := []byte(prefix)
	for _, c := range b {
		out = append(out, idAlphabet[c&31])
	}
	return string(out), nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// registeredClientPrefix starts the ID of every registered client; other
// client IDs are the URLs of Client ID Metadata Documents, with no row.
const registeredClientPrefix = "tbc_"

// RegisterOAuthClient stores a new client and returns it with its secret
// ("" for a public client), which only this call returns.
func (s *Store) RegisterOAuthClient(ctx context.Context, name string, redirectURIs []string, confidential bool) (_ OAuthClient, secret string, err error) {
	defer mapWriteErr(&err)
	id, err := randomID(registeredClientPrefix, 20)
	if err != nil {
		return OAuthClient{}, "", err
	}
	c := OAuthClient{ID: id, Name: name, RedirectURIs: redirectURIs, Confidential: confidential}
	if confidential {
		if secret, err = randomString(32); err != nil {
			return OAuthClient{}, "", err
		}
		c.secretHash = sha256Hex(secret)
	}
	var ms int64
	c.Created, ms = now()
	if _, err := s.db.ExecContext(ctx, qInsertOAuthClient, id, c.secretHash, name, strings.Join(redirectURIs, " "), ms); err != nil {
		return OAuthClient{}, "", fmt.Errorf("register OAuth client: %w", err)
	}
	s.log.WithFields(logrus.Fields{"client": id, "name": name, "confidential": confidential}).Info("registered OAuth client")
	return c, secret, nil
}

// OAuthClient returns the registered client id, or ErrNotFound.
func (s *Store) OAuthClient(ctx context.Context, id string) (OAuthClient, error) {
	c := OAuthClient{ID: id}
	var uris string
	var ms, usedMs int64
	err := s.db.QueryRowContext(ctx, qSelectOAuthClient, id).Scan(&c.secretHash, &c.Name, &uris, &ms, &usedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return OAuthClient{}, fmt.Errorf("OAuth client %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return OAuthClient{}, fmt.Errorf("OAuth client %q: %w", id, err)
	}
	c.RedirectURIs = strings.Fields(uris)
	c.Confidential = c.secretHash != ""
	c.Created = fromMillis(ms)
	if usedMs != 0 {
		c.Used = fromMillis(usedMs)
	}
	return c, nil
}

// PurgeUnusedOAuthClients deletes the clients registered before
// registeredBefore that no user ever consented to, and returns how many.
// Registration is open to anyone, as MCP clients need it: this bounds
// what registrations nobody signed in with leave behind. A client that
// was used once stays, since clients keep their ID and not every client
// registers again when it is refused.
func (s *Store) PurgeUnusedOAuthClients(ctx context.Context, registeredBefore time.Time) (_ int64, err error) {
	defer mapWriteErr(&err)
	res, err := s.db.ExecContext(ctx, qPurgeOAuthClients, registeredBefore.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("purge unused OAuth clients: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purge unused OAuth clients: %w", err)
	}
	if n > 0 {
		s.log.WithField("clients", n).Info("purged OAuth clients never used")
	}
	return n, nil
}

// OAuthClientSummary is a registered client as operators see it
// (ListOAuthClients): the client and how much of it is live.
type OAuthClientSummary struct {
	OAuthClient
	// LastUsed is the newest last use of the client's tokens; zero if
	// none was used (or none is left). A use is written within a minute
	// (see TokenLastUsed).
	LastUsed time.Time
	// Grants are its live grants (not revoked, refresh token not
	// expired); Tokens its live access tokens.
	Grants, Tokens int
}

// ListOAuthClients lists the registered clients, oldest first, with their
// live grants and tokens. Clients known by a metadata document URL have
// no row and are not listed: their tokens are in ListTokens.
func (s *Store) ListOAuthClients(ctx context.Context) ([]OAuthClientSummary, error) {
	_, ms := now()
	rows, err := s.db.QueryContext(ctx, qListOAuthClients, ms)
	if err != nil {
		return nil, fmt.Errorf("list OAuth clients: %w", err)
	}
	defer rows.Close()
	var out []OAuthClientSummary
	for rows.Next() {
		var c OAuthClientSummary
		var uris string
		var createdMs, usedMs, grants, tokens, lastMs int64
		if err := rows.Scan(&c.ID, &c.secretHash, &c.Name, &uris, &createdMs, &usedMs, &grants, &tokens, &lastMs); err != nil {
			return nil, fmt.Errorf("list OAuth clients: %w", err)
		}
		c.RedirectURIs = strings.Fields(uris)
		c.Confidential = c.secretHash != ""
		c.Created = fromMillis(createdMs)
		if usedMs != 0 {
			c.Used = fromMillis(usedMs)
		}
		if lastMs != 0 {
			c.LastUsed = fromMillis(lastMs)
		}
		c.Grants, c.Tokens = int(grants), int(tokens)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list OAuth clients: %w", err)
	}
	return out, nil
}

// DeletedOAuthClient is what DeleteOAuthClient removed.
type DeletedOAuthClient struct {
	ID string
	// Rows removed with the client: every grant (live or ended), every
	// authorization code and every access token issued to it.
	Grants, Codes, Tokens int
}

// DeleteOAuthClient deletes registered client id with its grants, its
// authorization codes and its tokens, in one transaction. Its tokens stop
// working at once in this process and within StoreOptions.TokenCacheTTL in
// others that share the database; its refresh tokens are refused (their
// grants are gone). The client may register again: it gets a new ID. An
// unknown client gives ErrNotFound.
func (s *Store) DeleteOAuthClient(ctx context.Context, id string) (_ DeletedOAuthClient, err error) {
	defer mapWriteErr(&err)
	out := DeletedOAuthClient{ID: id}
	var tokenIDs []string
	// Invalidate after the commit (see tokenCache.invalidate), also when
	// it failed halfway: a dropped cache entry is only read again.
	defer func() {
		for _, t := range tokenIDs {
			s.tokens.invalidate(t)
		}
	}()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return out, fmt.Errorf("delete OAuth client %s: %w", id, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// The client's row first: on PostgreSQL its lock makes a grant being
	// made meanwhile wait for this commit (GrantOAuth).
	res, err := tx.ExecContext(ctx, qDeleteOAuthClient, id)
	if err != nil {
		return out, fmt.Errorf("delete OAuth client %s: %w", id, err)
	}
	if err := mustAffect(res); err != nil {
		return out, fmt.Errorf("OAuth client %q: %w", id, err)
	}
	n, err := affected(tx.ExecContext(ctx, qDeleteOAuthGrantsOf, id))
	if err != nil {
		return out, fmt.Errorf("delete OAuth client %s: grants: %w", id, err)
	}
	out.Grants = int(n)
	if n, err = affected(tx.ExecContext(ctx, qDeleteOAuthCodesOf, id)); err != nil {
		return out, fmt.Errorf("delete OAuth client %s: codes: %w", id, err)
	}
	out.Codes = int(n)
	// Tokens last: one a refresh made before the grants went is here now.
	rows, err := tx.QueryContext(ctx, qDeleteOAuthClientTokens, id)
	if err != nil {
		return out, fmt.Errorf("delete OAuth client %s: tokens: %w", id, err)
	}
	var ids []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return out, fmt.Errorf("delete OAuth client %s: tokens: %w", id, err)
		}
		ids = append(ids, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("delete OAuth client %s: tokens: %w", id, err)
	}
	tokenIDs = ids
	if err := tx.Commit(); err != nil {
		return out, fmt.Errorf("delete OAuth client %s: %w", id, err)
	}
	out.Tokens = len(ids)
	s.log.WithFields(logrus.Fields{"client": id, "grants": out.Grants, "codes": out.Codes, "tokens": out.Tokens}).Info("deleted OAuth client")
	return out, nil
}

// OAuthCode is what an authorization code stands for.
type OAuthCode struct {
	ClientID    string
	RedirectURI string
	// Challenge is the PKCE S256 code challenge.
	Challenge string
	// Spec is the token the code is exchanged for (its TTL the access
	// token's).
	Spec    TokenSpec
	Expires time.Time
	// GrantID is the grant the code's redemption makes (RedeemOAuthCode
	// sets it): a second redemption revokes it, before or after it exists.
	GrantID string
}

// SaveOAuthCode stores c and returns the code: 256 random bits, of which
// the store keeps a hash. It also drops codes expired an hour or more ago.
// A registered client is marked used, so PurgeUnusedOAuthClients keeps it
// from now on; one purged while the user consented gives ErrNotFound.
func (s *Store) SaveOAuthCode(ctx context.Context, c OAuthCode) (code string, err error) {
	defer mapWriteErr(&err)
	spec, err := json.Marshal(c.Spec)
	if err != nil {
		return "", fmt.Errorf("save code: %w", err)
	}
	if code, err = randomString(32); err != nil {
		return "", err
	}
	_, ms := now()
	if _, err := s.db.ExecContext(ctx, qPurgeOAuthCodes, ms-time.Hour.Milliseconds()); err != nil {
		return "", fmt.Errorf("save code: purge: %w", err)
	}
	if strings.HasPrefix(c.ClientID, registeredClientPrefix) {
		n, err := affected(s.db.ExecContext(ctx, qUseOAuthClient, c.ClientID, ms))
		if err != nil {
			return "", fmt.Errorf("save code: mark client used: %w", err)
		}
		if n == 0 {
			return "", fmt.Errorf("save code: OAuth client %q: %w", c.ClientID, ErrNotFound)
		}
	}
	if _, err := s.db.ExecContext(ctx, qInsertOAuthCode, sha256Hex(code), c.ClientID, c.RedirectURI, c.Challenge, string(spec), c.Expires.UnixMilli()); err != nil {
		return "", fmt.Errorf("save code: %w", err)
	}
	return code, nil
}

// RedeemOAuthCode marks code used and returns what it stands for. Errors
// wrap ErrInvalidGrant for a code that is unknown, expired or used
// (ErrCodeReused, whose grant is then revoked).
func (s *Store) RedeemOAuthCode(ctx context.Context, code string) (_ OAuthCode, err error) {
	defer mapWriteErr(&err)
	hash := sha256Hex(code)
	_, ms := now()
	gid, err := randomID(grantIDPrefix, grantIDLen-len(grantIDPrefix))
	if err != nil {
		return OAuthCode{}, err
	}
	c := OAuthCode{GrantID: gid}
	var spec string
	var expMs int64
	err = s.db.QueryRowContext(ctx, qRedeemOAuthCode, hash, ms, gid).Scan(&c.ClientID, &c.RedirectURI, &c.Challenge, &spec, &expMs)
	if err == nil {
		c.Expires = fromMillis(expMs)
		if err := json.Unmarshal([]byte(spec), &c.Spec); err != nil {
			return OAuthCode{}, fmt.Errorf("redeem code: stored spec: %w", err)
		}
		return c, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return OAuthCode{}, fmt.Errorf("redeem code: %w", err)
	}
	var usedMs int64
	var grant string
	err = s.db.QueryRowContext(ctx, qSelectOAuthCodeUse, hash).Scan(&usedMs, &grant)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return OAuthCode{}, fmt.Errorf("%w: unknown authorization code", ErrInvalidGrant)
	case err != nil:
		return OAuthCode{}, fmt.Errorf("redeem code: %w", err)
	case usedMs == 0:
		return OAuthCode{}, fmt.Errorf("%w: authorization code expired", ErrInvalidGrant)
	}
	// The first redemption may not have made its grant yet: a revoked
	// row in its place makes GrantOAuth fail; if the grant is there, it
	// is revoked.
	res, err := s.db.ExecContext(ctx, qInsertRevokedGrant, grant, ms)
	if err != nil {
		return OAuthCode{}, fmt.Errorf("redeem code: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return OAuthCode{}, fmt.Errorf("redeem code: %w", err)
	} else if n == 0 {
		if err := s.revokeGrant(ctx, grant); err != nil {
			return OAuthCode{}, err
		}
	}
	return OAuthCode{}, ErrCodeReused
}

// OAuthTokens are what a token request gets: an access token (a Token
// with an Audience and ClientID) and a refresh token.
type OAuthTokens struct {
	Access         string
	Token          Token
	Refresh        string
	RefreshExpires time.Time
}

// grantKeep is how long a revoked or expired grant's row is kept.
const grantKeep = 30 * 24 * time.Hour

// Refresh token format: "tbr_<16-character grant ID>_<43 characters of
// base64url>". The grant ID finds the row; the rest is compared by hash.
const (
	grantIDPrefix = "tbr_"
	grantIDLen    = len(grantIDPrefix) + 16
	refreshLen    = grantIDLen + 1 + 43
)

func newRefresh(grantID string) (string, error) {
	r, err := randomString(32)
	if err != nil {
		return "", err
	}
	return grantID + "_" + r, nil
}

// parseRefresh returns the grant ID of a refresh token's shape.
func parseRefresh(tok string) (string, bool) {
	if len(tok) != refreshLen || !strings.HasPrefix(tok, grantIDPrefix) || tok[grantIDLen] != '_' {
		return "", false
	}
	return tok[:grantIDLen], true
}

// GrantOAuth mints the tokens of a redeemed code: an access token for its
// spec and a refresh token valid for refreshTTL, under the code's grant
// ID. If the code came again meanwhile, the grant is refused
// (ErrCodeReused) and the access token deleted.
func (s *Store) GrantOAuth(ctx context.Context, c OAuthCode, refreshTTL time.Duration) (_ OAuthTokens, err error) {
	defer mapWriteErr(&err)
	secret, tok, err := s.CreateToken(ctx, c.Spec)
	if err != nil {
		return OAuthTokens{}, err
	}
	refresh, err := newRefresh(c.GrantID)
	if err != nil {
		return OAuthTokens{}, err
	}
	created, ms := now()
	exp := created.Add(refreshTTL)
	// Grants ended a month ago are of no more use, not even to tell a
	// replayed refresh token (its grant is gone: it is refused anyway).
	if _, err := s.db.ExecContext(ctx, qPurgeOAuthGrants, ms-grantKeep.Milliseconds()); err != nil {
		return OAuthTokens{}, fmt.Errorf("grant: purge: %w", err)
	}
	n, err := affected(s.db.ExecContext(ctx, qInsertOAuthGrant, c.GrantID, c.Spec.ClientID, c.Spec.UserID, tok.ID, sha256Hex(refresh), ms, exp.UnixMilli()))
	if err != nil || n != 1 {
		_ = s.deleteToken(ctx, tok.ID)
		if err != nil {
			return OAuthTokens{}, fmt.Errorf("grant: %w", err)
		}
		return OAuthTokens{}, ErrCodeReused // its revoked row is in the way
	}
	// A client deleted since its code was redeemed gets nothing. Touching
	// the client's row after the token and grant are written orders this
	// with DeleteOAuthClient: either the client's row is still there and
	// the deletion, which comes later, takes the token and grant with it,
	// or it is gone (on PostgreSQL the touch waits for the deletion's
	// commit) and they are taken back here.
	if strings.HasPrefix(c.Spec.ClientID, registeredClientPrefix) {
		n, err := affected(s.db.ExecContext(ctx, qUseOAuthClient, c.Spec.ClientID, ms))
		if err != nil || n == 0 {
			_, _ = s.db.ExecContext(ctx, qDeleteOAuthGrant, c.GrantID)
			_ = s.deleteToken(ctx, tok.ID)
			if err != nil {
				return OAuthTokens{}, fmt.Errorf("grant: %w", err)
			}
			return OAuthTokens{}, fmt.Errorf("%w: the client was deleted", ErrInvalidGrant)
		}
	}
	return OAuthTokens{Access: secret, Token: tok, Refresh: refresh, RefreshExpires: exp}, nil
}

// grantRow is a stored grant.
type grantRow struct {
	clientID, tokenID               string
	hash, prevHash                  string
	createdMs, expiresMs, revokedMs int64
}

func (s *Store) loadGrant(ctx context.Context, id string) (grantRow, bool, error) {
	var g grantRow
	err := s.db.QueryRowContext(ctx, qSelectOAuthGrant, id).Scan(&g.clientID, &g.tokenID, &g.hash, &g.prevHash, &g.createdMs, &g.expiresMs, &g.revokedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return grantRow{}, false, nil
	}
	if err != nil {
		return grantRow{}, false, fmt.Errorf("grant %s: %w", id, err)
	}
	return g, true, nil
}

func sameHash(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// affected is the number of rows an ExecContext changed, or its error.
func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// OAuthRefresh is a refresh request (RefreshOAuth).
type OAuthRefresh struct {
	Token, ClientID string
	// Resource, if set, must be the grant's (RFC 8707): a refresh cannot
	// move a grant to another resource.
	Resource string
	// Scopes, if not empty, narrow the grant to these of its scopes from
	// this refresh on: the new access token has them, and so has every
	// later one (RFC 6749 section 6: "scope" on a refresh). One the grant
	// does not hold is refused with ErrScopeNotGranted.
	Scopes []string
	// AccessTTL is the new access token's lifetime; RefreshTTL how long
	// the new refresh token is valid, within MaxAge of the grant's
	// creation (0: no bound), after which the user must sign in again.
	AccessTTL, RefreshTTL, MaxAge time.Duration
}

// ErrInvalidTarget is returned by RefreshOAuth for a Resource that is not
// the grant's. The grant is left as it was.
var ErrInvalidTarget = errors.New("invalid target")

// ErrScopeNotGranted is returned by RefreshOAuth for Scopes beyond the
// grant's (OAuth's invalid_scope). The grant is left as it was.
var ErrScopeNotGranted = errors.New("scope not granted")

// ErrOtherClient is returned by RevokeOAuth for a token that was not
// issued to the client asking (RFC 7009 section 2.1: unauthorized_client).
// The token is left as it was.
var ErrOtherClient = errors.New("the token was not issued to this client")

// RefreshOAuth rotates a refresh token: it returns a new access token
// (the grant's last one is deleted) and a new refresh token. A refresh
// token presented again after its rotation revokes the grant (a stolen
// one was used). Refusals wrap ErrInvalidGrant, among them a grant whose
// access token an operator revoked, and ErrInvalidTarget.
//
// The new access token is minted first and the grant then moved to it in
// one conditional statement, so that a revocation or another refresh
// racing this one wins cleanly: the loser's token is deleted.
func (s *Store) RefreshOAuth(ctx context.Context, req OAuthRefresh) (_ OAuthTokens, err error) {
	defer mapWriteErr(&err)
	gid, ok := parseRefresh(req.Token)
	if !ok {
		return OAuthTokens{}, fmt.Errorf("%w: not a refresh token", ErrInvalidGrant)
	}
	g, found, err := s.loadGrant(ctx, gid)
	if err != nil {
		return OAuthTokens{}, err
	}
	hash := sha256Hex(req.Token)
	switch {
	case !found:
		return OAuthTokens{}, fmt.Errorf("%w: unknown refresh token", ErrInvalidGrant)
	case !sameHash(hash, g.hash):
		// The grant's ID is in its refresh tokens only, so this is one
		// of them from before a rotation, presented again: one holder of
		// the grant is not its client. Revoke it, however many rotations
		// ago that token was replaced (RFC 9700 section 4.14.2).
		if err := s.revokeGrant(ctx, gid); err != nil {
			return OAuthTokens{}, err
		}
		return OAuthTokens{}, fmt.Errorf("%w: refresh token used after its rotation; the grant is revoked", ErrInvalidGrant)
	case g.clientID != req.ClientID:
		return OAuthTokens{}, fmt.Errorf("%w: refresh token issued to another client", ErrInvalidGrant)
	case g.revokedMs != 0:
		return OAuthTokens{}, fmt.Errorf("%w: grant revoked", ErrInvalidGrant)
	}
	created, ms := now()
	if ms >= g.expiresMs {
		return OAuthTokens{}, fmt.Errorf("%w: refresh token expired", ErrInvalidGrant)
	}
	exp := created.Add(req.RefreshTTL)
	if req.MaxAge > 0 {
		end := fromMillis(g.createdMs).Add(req.MaxAge)
		if !created.Before(end) {
			return OAuthTokens{}, fmt.Errorf("%w: the grant is older than %v: sign in again", ErrInvalidGrant, req.MaxAge)
		}
		if end.Before(exp) {
			exp = end
		}
	}
	old, err := scanToken(s.db.QueryRowContext(ctx, qSelectToken, g.tokenID))
	if err != nil {
		return OAuthTokens{}, fmt.Errorf("refresh: access token %s: %w", g.tokenID, err)
	}
	if old.revokedMs != 0 {
		if err := s.revokeGrant(ctx, gid); err != nil {
			return OAuthTokens{}, err
		}
		return OAuthTokens{}, fmt.Errorf("%w: its access token %s was revoked", ErrInvalidGrant, g.tokenID)
	}
	t := old.tok
	if req.Resource != "" && strings.TrimSuffix(req.Resource, "/") != strings.TrimSuffix(t.Audience, "/") {
		return OAuthTokens{}, fmt.Errorf("%w: the grant is for %s", ErrInvalidTarget, t.Audience)
	}
	scopes := t.Scopes
	if len(req.Scopes) > 0 {
		for _, sc := range req.Scopes {
			if !slices.Contains(t.Scopes, sc) {
				return OAuthTokens{}, fmt.Errorf("%w: the grant holds %s, not %s", ErrScopeNotGranted, strings.Join(t.Scopes, " "), sc)
			}
		}
		scopes = slices.DeleteFunc(slices.Clone(t.Scopes), func(sc string) bool { return !slices.Contains(req.Scopes, sc) })
	}
	next, err := newRefresh(gid)
	if err != nil {
		return OAuthTokens{}, err
	}
	secret, tok, err := s.CreateToken(ctx, TokenSpec{UserID: t.UserID, Scopes: scopes, ReadOnly: t.ReadOnly, Entities: t.Entities,
		Agents: t.Agents, TTL: req.AccessTTL, Name: t.Name, Audience: t.Audience, ClientID: t.ClientID})
	if err != nil {
		return OAuthTokens{}, err
	}
	n, err := affected(s.db.ExecContext(ctx, qRotateOAuthGrant, gid, sha256Hex(next), hash, exp.UnixMilli(), tok.ID))
	if err != nil || n != 1 {
		_ = s.deleteToken(ctx, tok.ID) // the grant never pointed at it
		if err != nil {
			return OAuthTokens{}, fmt.Errorf("refresh: %w", err)
		}
		return OAuthTokens{}, fmt.Errorf("%w: refresh token rotated by another request, or the grant revoked", ErrInvalidGrant)
	}
	// The replaced access token goes, row and all: kept revoked, a token
	// refreshed every hour would leave hundreds of rows a month in the
	// token list. The audit log keeps its ID.
	if err := s.deleteToken(ctx, t.ID); err != nil {
		return OAuthTokens{}, err
	}
	return OAuthTokens{Access: secret, Token: tok, Refresh: next, RefreshExpires: exp}, nil
}

// deleteToken removes a token's row, and so ends it at once.
func (s *Store) deleteToken(ctx context.Context, id string) error {
	defer s.tokens.invalidate(id) // after the write (see tokenCache.invalidate)
	if _, err := s.db.ExecContext(ctx, qDeleteToken, id); err != nil {
		return fmt.Errorf("delete token %s: %w", id, err)
	}
	return nil
}

// revokeGrant revokes grant id and its current access token.
func (s *Store) revokeGrant(ctx context.Context, id string) error {
	_, ms := now()
	var tokenID string
	err := s.db.QueryRowContext(ctx, qRevokeOAuthGrant, id, ms).Scan(&tokenID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("revoke grant %s: %w", id, err)
	}
	if err := s.RevokeToken(ctx, tokenID); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	s.log.WithFields(logrus.Fields{"grant": id, "token": tokenID}).Info("revoked OAuth grant")
	return nil
}

// RevokeOAuth revokes the grant that token (an access or refresh token
// issued to clientID) belongs to, and so both its tokens (RFC 7009). A
// token that is unknown or malformed is left alone and gives no error, as
// RFC 7009 wants; a genuine token not issued to clientID (another
// client's, a personal one) is left alone too, with ErrOtherClient
// (section 2.1). Other errors are the database's.
func (s *Store) RevokeOAuth(ctx context.Context, token, clientID string) (err error) {
	defer mapWriteErr(&err)
	if gid, ok := parseRefresh(token); ok {
		g, found, err := s.loadGrant(ctx, gid)
		if err != nil || !found {
			return err
		}
		hash := sha256Hex(token)
		if !sameHash(hash, g.hash) && !sameHash(hash, g.prevHash) {
			return nil
		}
		if g.clientID != clientID {
			return ErrOtherClient
		}
		return s.revokeGrant(ctx, gid)
	}
	id, ok := parseSecret(token)
	if !ok {
		return nil
	}
	row, err := scanToken(s.db.QueryRowContext(ctx, qSelectToken, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	sum := hashSecret(token)
	if subtle.ConstantTimeCompare(row.hash[:], sum[:]) != 1 {
		return nil
	}
	if row.tok.ClientID != clientID {
		return ErrOtherClient
	}
	var gid string
	err = s.db.QueryRowContext(ctx, qSelectOAuthGrantOfToken, id).Scan(&gid)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return s.RevokeToken(ctx, id)
	case err != nil:
		return fmt.Errorf("revoke: %w", err)
	}
	return s.revokeGrant(ctx, gid)
}

// ErrPendingLogin is returned by TakePendingLogin for a state that is
// unknown, expired or taken before.
var ErrPendingLogin = errors.New("no such sign-in under way (unknown, expired or finished)")

// SavePendingLogin keeps data (a sign-in handed to an OpenID provider)
// until expires, and returns the random state that takes it back. It also
// drops the expired ones.
func (s *Store) SavePendingLogin(ctx context.Context, data []byte, expires time.Time) (state string, err error) {
	defer mapWriteErr(&err)
	if state, err = randomString(32); err != nil {
		return "", err
	}
	_, ms := now()
	if _, err := s.db.ExecContext(ctx, qPurgeOAuthPending, ms); err != nil {
		return "", fmt.Errorf("save sign-in: purge: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, qInsertOAuthPending, sha256Hex(state), string(data), expires.UnixMilli()); err != nil {
		return "", fmt.Errorf("save sign-in: %w", err)
	}
	return state, nil
}

// TakePendingLogin returns the data saved under state and forgets it, so
// that a callback cannot be replayed. ErrPendingLogin when there is none.
func (s *Store) TakePendingLogin(ctx context.Context, state string) (_ []byte, err error) {
	defer mapWriteErr(&err)
	var data string
	var expMs int64
	err = s.db.QueryRowContext(ctx, qTakeOAuthPending, sha256Hex(state)).Scan(&data, &expMs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrPendingLogin
	}
	if err != nil {
		return nil, fmt.Errorf("take sign-in: %w", err)
	}
	if _, ms := now(); ms >= expMs {
		return nil, ErrPendingLogin
	}
	return []byte(data), nil
}
