package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
	"github.com/toolbus/toolbus/contract"
)

// Scopes a personal access token can carry. A tool may require a scope of
// its own on top of these (see ValidateScope). Scopes do not imply one
// another: ScopeAdmin does not grant ScopeToolsCall.
const (
	// ScopeToolsList lets the token see tools (tools/list).
	ScopeToolsList = "tools:list"
	// ScopeToolsCall lets the token call the tools it can see (tools/call).
	ScopeToolsCall = "tools:call"
	// ScopeAdmin lets the token use the admin API (and read /metrics).
	ScopeAdmin = "admin"
	// ScopeMetrics lets the token read /metrics and nothing else of the
	// admin surface: the scope of a Prometheus scraper's token.
	ScopeMetrics = "metrics"
)

// BuiltinScopes are the scopes every toolbus knows; tools may add their own.
var BuiltinScopes = []string{ScopeToolsList, ScopeToolsCall, ScopeAdmin, ScopeMetrics}

// DefaultScopes are the scopes of a token created without any (TokenSpec.Scopes nil).
var DefaultScopes = []string{ScopeToolsList, ScopeToolsCall}

// Limits of a TokenSpec. They keep a token's row, and what the gateway scans
// on every request, small.
const (
	MaxTokenScopes   = 32
	MaxTokenEntities = 64
	// MaxTokenAgents bounds the agents a token may be limited to.
	MaxTokenAgents  = 64
	MaxTokenNameLen = 200 // bytes

	// maxURLLen bounds the URLs a token names (Audience, ClientID).
	maxURLLen = 2048
)

// Entity is what a request is about: the {entityType}/{entityId} of the MCP
// endpoint's path. The plain endpoint is {"_", "_"}. Both fields pass
// contract.ValidateLevel: they become topic levels.
type Entity struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// PlainEntity is the entity of the plain endpoint (no entity in the path).
var PlainEntity = Entity{Type: "_", ID: "_"}

// String returns "Type/ID", the form ParseEntity reads.
func (e Entity) String() string { return e.Type + "/" + e.ID }

// ParseEntity reads "TYPE/ID" (as given to `toolbus token create --entity`).
// Both parts must pass contract.ValidateLevel; the error wraps contract.ErrInvalidLevel.
func ParseEntity(s string) (Entity, error) {
	typ, id, ok := strings.Cut(s, "/")
	if !ok {
		return Entity{}, fmt.Errorf("entity %q: want TYPE/ID: %w", s, contract.ErrInvalidLevel)
	}
	if err := contract.ValidateLevel(typ); err != nil {
		return Entity{}, fmt.Errorf("entity %q: type: %w", s, err)
	}
	if err := contract.ValidateLevel(id); err != nil {
		return Entity{}, fmt.Errorf("entity %q: id: %w", s, err)
	}
	return Entity{Type: typ, ID: id}, nil
}

// ValidateScope reports whether s can be a scope: a known scope or a tool
// scope matching ^[a-z][a-z0-9_.:-]{0,63}$. The error wraps ErrInvalidScope.
func ValidateScope(s string) error {
	if len(s) == 0 || len(s) > 64 {
		return fmt.Errorf("%w: %q: want 1 to 64 bytes", ErrInvalidScope, s)
	}
	if s[0] < 'a' || s[0] > 'z' {
		return fmt.Errorf("%w: %q: must start with a-z", ErrInvalidScope, s)
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("%w: %q: byte %q at offset %d (allowed: a-z 0-9 _ . : -)", ErrInvalidScope, s, c, i)
		}
	}
	return nil
}

// TokenSpec describes a token to create.
type TokenSpec struct {
	// UserID owns the token; required, passes contract.ValidateLevel (it becomes the
	// userId level of the token's MQTT topics).
	UserID string
	// Scopes granted; nil means DefaultScopes. An empty non-nil slice is
	// refused rather than read as "the defaults", so that a caller who meant
	// "no scopes" does not mint a token that can call tools.
	Scopes []string
	// ReadOnly tokens may call only tools annotated readOnlyHint: true.
	ReadOnly bool
	// Entities narrows the token to these entities; empty means any entity
	// and the plain endpoint. A narrowed token cannot use the plain endpoint,
	// and an entity with a "_" part (the plain endpoint's marker) is refused.
	Entities []Entity
	// Agents limits the token to these expert agents (their names on the
	// bus, each passing contract.ValidateLevel): it lists and calls their tools
	// only (platform tools still follow Scopes). Empty means every agent.
	Agents []string
	// TTL after which the token expires; 0 means never.
	TTL time.Duration
	// Name is an optional note for operators (printable UTF-8, at most
	// MaxTokenNameLen bytes).
	Name string
	// Audience is the resource (RFC 8707) the token is for, an absolute
	// URL of an MCP endpoint: the gateway refuses it anywhere else. ""
	// (personal tokens) means wherever its scopes allow.
	Audience string
	// ClientID is the OAuth client the token was issued to; "" for a
	// personal token.
	ClientID string
}

// Token is a stored personal access token, without its secret (which only
// CreateToken ever returns). Tokens returned by AuthenticateToken share
// their Scopes and Entities with the store's cache: do not modify them.
type Token struct {
	// ID is the visible prefix of the secret ("tb_" and 8 characters), the
	// name list and revoke use. It is a valid topic level.
	ID       string
	UserID   string
	Scopes   []string
	ReadOnly bool
	Entities []Entity // empty = not narrowed
	Agents   []string // nil = every agent (an authenticated token's: within its user's grants)
	Name     string
	Audience string // "" = not bound to one resource (TokenSpec.Audience)
	ClientID string // the OAuth client holding it; "" = a personal token
	holder   string // Holder, computed when the row is read
	// Zero times are "not set": never expires, never used, not revoked.
	Created, ExpiresAt, LastUsed, RevokedAt time.Time
}

// Holder names who holds the token, for what stays bound to it across
// refreshes (an MCP session): for a token an OAuth consent minted, which
// each refresh replaces by a new one, its client and resource; for any
// other token, the token itself.
//
// A token read from the store has it computed once, with the row, so that
// the session lookup of every request costs no hash.
func (t Token) Holder() string {
	if t.holder != "" {
		return t.holder
	}
	return holderOf(t)
}

func holderOf(t Token) string {
	if t.ClientID == "" {
		return t.ID
	}
	sum := sha256.Sum256([]byte(t.ClientID + "\n" + t.Audience))
	return "oauth_" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// HasScope reports whether the token carries scope s (exactly: no scope
// implies another).
func (t Token) HasScope(s string) bool {
	for _, sc := range t.Scopes {
		if sc == s {
			return true
		}
	}
	return false
}

// AllowsAgent reports whether the token may list and call the tools of the
// expert agent named agent: every agent when Agents is nil (not limited),
// none when it is empty (its own list and its user's grants share none).
func (t Token) AllowsAgent(agent string) bool {
	return t.Agents == nil || slices.Contains(t.Agents, agent)
}

// AllowsEntity reports whether the token may reach entity e. A token that is
// not narrowed reaches every entity, PlainEntity included; a narrowed one
// only the entities it lists, never PlainEntity.
func (t Token) AllowsEntity(e Entity) bool {
	if len(t.Entities) == 0 {
		return true
	}
	if e == PlainEntity {
		return false
	}
	for _, x := range t.Entities {
		if x == e {
			return true
		}
	}
	return false
}

// Secret format: "<ID>_<43 characters of base64url (no padding) of 32 random
// bytes>", where ID is "tb_" and 8 characters of lower-case Crockford base32.
// The ID part lets a request find its row by primary key and an operator
// name the token without its secret; the random part carries the strength.
const (
	tokenIDPrefix = "tb_"
	tokenIDRand   = 8
	tokenIDLen    = len(tokenIDPrefix) + tokenIDRand
	secretRandLen = 43 // base64.RawURLEncoding.EncodedLen(32)
	secretLen     = tokenIDLen + 1 + secretRandLen

	idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz" // Crockford base32, lower case
)

// newSecret returns a fresh token ID and the secret that starts with it.
func newSecret() (id, secret string, err error) {
	var b [5 + 32]byte // 40 bits of ID, 256 bits of secret
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("token secret: %w", err)
	}
	buf := make([]byte, 0, secretLen)
	buf = append(buf, tokenIDPrefix...)
	var v uint64
	for _, c := range b[:5] {
		v = v<<8 | uint64(c)
	}
	for i := tokenIDRand - 1; i >= 0; i-- {
		buf = append(buf, idAlphabet[(v>>(5*uint(i)))&31])
	}
	buf = append(buf, '_')
	buf = base64.RawURLEncoding.AppendEncode(buf, b[5:])
	s := string(buf)
	return s[:tokenIDLen], s, nil
}

// parseSecret returns the token ID that secret starts with, or false when
// secret cannot be a toolbus token. It checks the shape only: whether the
// random part is right is for the hash comparison. It does not allocate.
func parseSecret(secret string) (id string, ok bool) {
	if len(secret) != secretLen || !validTokenID(secret[:tokenIDLen]) || secret[tokenIDLen] != '_' {
		return "", false
	}
	for i := tokenIDLen + 1; i < len(secret); i++ {
		if c := secret[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", false
		}
	}
	return secret[:tokenIDLen], true
}

// validTokenID reports whether id has the shape of a token ID.
func validTokenID(id string) bool {
	if len(id) != tokenIDLen || id[:len(tokenIDPrefix)] != tokenIDPrefix {
		return false
	}
	for i := len(tokenIDPrefix); i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' && c != 'i' && c != 'l' && c != 'o' && c != 'u') {
			return false // not in idAlphabet
		}
	}
	return true
}

// hashSecret is what the store keeps of a secret. A plain SHA-256 is enough:
// the secret has 256 random bits, so there is nothing to stretch.
func hashSecret(secret string) [sha256.Size]byte {
	if len(secret) == secretLen {
		// The request path: a stack copy spares the allocation of []byte(secret).
		var buf [secretLen]byte
		copy(buf[:], secret)
		return sha256.Sum256(buf[:])
	}
	return sha256.Sum256([]byte(secret))
}

// normalize validates spec and returns the scopes and entities to store
// (defaults filled in, duplicates dropped). Errors wrap ErrInvalidTokenSpec.
func (spec TokenSpec) normalize() (scopes []string, entities []Entity, agents []string, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidTokenSpec}, args...)...)
	}
	if err := contract.ValidateLevel(spec.UserID); err != nil {
		return nil, nil, nil, bad("user: %w", err)
	}
	switch {
	case spec.Scopes == nil:
		scopes = slices.Clone(DefaultScopes)
	case len(spec.Scopes) == 0:
		return nil, nil, nil, bad("empty scope list (nil means the default scopes)")
	case len(spec.Scopes) > MaxTokenScopes:
		return nil, nil, nil, bad("%d scopes, at most %d", len(spec.Scopes), MaxTokenScopes)
	default:
		for _, s := range spec.Scopes {
			if err := ValidateScope(s); err != nil {
				return nil, nil, nil, bad("%w", err)
			}
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	if len(spec.Entities) > MaxTokenEntities {
		return nil, nil, nil, bad("%d entities, at most %d", len(spec.Entities), MaxTokenEntities)
	}
	for _, e := range spec.Entities {
		if err := contract.ValidateLevel(e.Type); err != nil {
			return nil, nil, nil, bad("entity type %q: %w", e.Type, err)
		}
		if err := contract.ValidateLevel(e.ID); err != nil {
			return nil, nil, nil, bad("entity id %q: %w", e.ID, err)
		}
		if e.Type == PlainEntity.Type || e.ID == PlainEntity.ID {
			return nil, nil, nil, bad("entity %s: %q is reserved for the plain endpoint", e, PlainEntity.Type)
		}
		if !slices.Contains(entities, e) {
			entities = append(entities, e)
		}
	}
	if len(spec.Agents) > MaxTokenAgents {
		return nil, nil, nil, bad("%d agents, at most %d", len(spec.Agents), MaxTokenAgents)
	}
	for _, a := range spec.Agents {
		if err := contract.ValidateLevel(a); err != nil {
			return nil, nil, nil, bad("agent %q: %w", a, err)
		}
		if !slices.Contains(agents, a) {
			agents = append(agents, a)
		}
	}
	if spec.TTL < 0 {
		return nil, nil, nil, bad("negative TTL %v", spec.TTL)
	}
	if len(spec.Name) > MaxTokenNameLen {
		return nil, nil, nil, bad("name of %d bytes, at most %d", len(spec.Name), MaxTokenNameLen)
	}
	if len(spec.Audience) > maxURLLen || len(spec.ClientID) > maxURLLen {
		return nil, nil, nil, bad("audience or client ID longer than %d bytes", maxURLLen)
	}
	if !utf8.ValidString(spec.Name) || strings.IndexFunc(spec.Name, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0 {
		// Names are printed in tables and logs: no control characters.
		return nil, nil, nil, bad("name %q: only printable characters", spec.Name)
	}
	return scopes, entities, agents, nil
}

// CreateToken stores a new token for spec and returns its secret, which is
// shown once: the store keeps only its SHA-256. An invalid spec gives an
// error wrapping ErrInvalidTokenSpec.
func (s *Store) CreateToken(ctx context.Context, spec TokenSpec) (secret string, tok Token, err error) {
	defer mapWriteErr(&err)
	scopes, entities, agents, err := spec.normalize()
	if err != nil {
		return "", Token{}, err
	}
	created, ms := now()
	tok = Token{
		UserID:   spec.UserID,
		Scopes:   scopes,
		ReadOnly: spec.ReadOnly,
		Entities: entities,
		Agents:   agents,
		Name:     spec.Name,
		Audience: spec.Audience,
		ClientID: spec.ClientID,
		Created:  created,
	}
	var expiresMs int64
	if spec.TTL > 0 {
		expiresMs = ms + max(spec.TTL.Milliseconds(), 1)
		tok.ExpiresAt = fromMillis(expiresMs)
	}
	// 40 random bits of ID: a collision is rare but possible among many
	// tokens, so draw again (the insert does not overwrite).
	for range 5 {
		id, sec, err := newSecret()
		if err != nil {
			return "", Token{}, err
		}
		sum := hashSecret(sec)
		res, err := s.db.ExecContext(ctx, qInsertToken, id, spec.UserID, hex.EncodeToString(sum[:]),
			strings.Join(scopes, " "), boolInt(spec.ReadOnly), formatEntities(entities), spec.Name, ms, expiresMs, strings.Join(agents, " "),
			spec.Audience, spec.ClientID)
		if err != nil {
			return "", Token{}, fmt.Errorf("create token for %s: %w", spec.UserID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return "", Token{}, fmt.Errorf("create token for %s: %w", spec.UserID, err)
		} else if n == 1 {
			tok.ID = id
			s.log.WithFields(logrus.Fields{"token": id, "user": spec.UserID, "scopes": scopes,
				"read_only": spec.ReadOnly, "entities": len(entities), "agents": agents}).Info("created token")
			return sec, tok, nil
		}
	}
	return "", Token{}, fmt.Errorf("create token for %s: no free token ID after 5 draws", spec.UserID)
}

// ListTokens returns the tokens of userID ("" = of every user), oldest
// first. Secrets are never stored, so never returned.
func (s *Store) ListTokens(ctx context.Context, userID string) ([]Token, error) {
	q, args := qListTokens, []any(nil)
	if userID != "" {
		q, args = qListTokensOfUser, []any{userID}
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var toks []Token
	for rows.Next() {
		r, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		toks = append(toks, r.tok)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return toks, nil
}

// RevokeToken revokes the token with this ID. It stops working at once in
// this process and within StoreOptions.TokenCacheTTL in others that share
// the database. Revoking a revoked token is a no-op (its RevokedAt stays);
// an unknown ID gives ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, id string) (err error) {
	defer mapWriteErr(&err)
	// Invalidate after the write (a request that reads the row in between
	// must not re-cache it): see tokenCache.invalidate.
	defer s.tokens.invalidate(id)
	if !validTokenID(id) {
		return fmt.Errorf("token %q: %w", id, ErrNotFound)
	}
	_, ms := now()
	var revokedMs int64
	err = s.db.QueryRowContext(ctx, qRevokeToken, id, ms).Scan(&revokedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if revokedMs == ms {
		s.log.WithField("token", id).Info("revoked token")
	}
	return nil
}

// tokenRow is a token as stored, with what authentication needs beyond Token.
type tokenRow struct {
	tok       Token
	hash      [sha256.Size]byte
	expiresMs int64 // 0 = never
	revokedMs int64 // 0 = not revoked
	lastMs    int64 // 0 = never used
}

func scanToken(r rowScanner) (tokenRow, error) {
	var (
		row                            tokenRow
		hash, scopes, entities, agents string
		readOnly, createdMs            int64
	)
	t := &row.tok
	if err := r.Scan(&t.ID, &t.UserID, &hash, &scopes, &readOnly, &entities, &t.Name,
		&createdMs, &row.expiresMs, &row.lastMs, &row.revokedMs, &agents, &t.Audience, &t.ClientID); err != nil {
		return tokenRow{}, err
	}
	if n, err := hex.Decode(row.hash[:], []byte(hash)); err != nil || n != sha256.Size {
		return tokenRow{}, fmt.Errorf("%w: token %s: stored hash is not %d bytes of hex", errCorruptToken, t.ID, sha256.Size)
	}
	var err error
	if t.Entities, err = parseEntities(entities); err != nil {
		return tokenRow{}, fmt.Errorf("%w: token %s: stored entities: %w", errCorruptToken, t.ID, err)
	}
	// Full slice expressions: an append by a caller copies instead of
	// writing into the cached backing array.
	t.Scopes = strings.Fields(scopes)
	t.Scopes = t.Scopes[:len(t.Scopes):len(t.Scopes)]
	if t.Agents = strings.Fields(agents); len(t.Agents) == 0 {
		t.Agents = nil
	} else {
		t.Agents = t.Agents[:len(t.Agents):len(t.Agents)]
	}
	t.ReadOnly = readOnly != 0
	t.holder = holderOf(*t)
	t.Created = fromMillis(createdMs)
	t.ExpiresAt = optMillis(row.expiresMs)
	t.LastUsed = optMillis(row.lastMs)
	t.RevokedAt = optMillis(row.revokedMs)
	return row, nil
}

// formatEntities stores entities as space-separated "type/id" (levels hold
// neither character).
func formatEntities(es []Entity) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return strings.Join(parts, " ")
}

func parseEntities(s string) ([]Entity, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, nil
	}
	es := make([]Entity, len(fields))
	for i, f := range fields {
		e, err := ParseEntity(f)
		if err != nil {
			return nil, err
		}
		es[i] = e
	}
	return es, nil
}

func optMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return fromMillis(ms)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
