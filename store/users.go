package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"golang.org/x/crypto/argon2"
)

// User is a person who signs in on the OAuth authorization page
// (toolbus user add). Their ID is the userId of the tokens their
// consents mint, and so a topic level.
type User struct {
	ID      string
	Created time.Time
	// Admin: the user may sign in to the operator console (console/).
	// It grants nothing on the MCP endpoint or the admin API, where
	// scopes decide.
	Admin bool
}

// UserState is what a console session of a user depends on: it ends when
// the user is removed, loses Admin, or gets a new password (a new
// PasswordStamp).
type UserState struct {
	Admin bool
	// PasswordStamp changes whenever the password does. It is a digest of
	// the stored hash, so a session can keep it without keeping the hash.
	PasswordStamp string
}

// Argon2id parameters of new user passwords: OWASP's first choice for
// password storage (19 MiB, two passes, one lane).
const (
	argonTime    = 2
	argonMemory  = 19 * 1024 // KiB
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
	// argonMaxMemory bounds the memory a stored hash may ask for, so that
	// a tampered row cannot make one sign-in take the machine's memory.
	argonMaxMemory = 1024 * 1024 // KiB
	argonMaxTime   = 16
)

// hashArgon2id encodes password in the PHC string format
// ("$argon2id$v=19$m=…,t=…,p=…$<salt>$<key>", unpadded standard base64).
func hashArgon2id(password []byte) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	return encodeArgon2id(salt, argon2.IDKey(password, salt, argonTime, argonMemory, argonThreads, argonKeyLen)), nil
}

// encodeArgon2id writes salt and key with the parameters of new hashes.
func encodeArgon2id(salt, key []byte) string {
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		enc.EncodeToString(salt), enc.EncodeToString(key))
}

// newDummyArgon2id makes a well-formed hash with the parameters of new
// ones that no password matches (random salt and key).
func newDummyArgon2id() (string, error) {
	b := make([]byte, argonSaltLen+argonKeyLen)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("dummy hash: %w", err)
	}
	return encodeArgon2id(b[:argonSaltLen], b[argonSaltLen:]), nil
}

// verifyArgon2id reports whether password matches the PHC string encoded.
// A malformed string gives an error wrapping acl.ErrInvalidHash.
func verifyArgon2id(encoded string, password []byte) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return false, fmt.Errorf("%w: not an argon2id v=%d PHC string", acl.ErrInvalidHash, argon2.Version)
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil ||
		m < 8 || m > argonMaxMemory || t < 1 || t > argonMaxTime || p < 1 {
		return false, fmt.Errorf("%w: argon2id parameters %q", acl.ErrInvalidHash, parts[3])
	}
	enc := base64.RawStdEncoding
	salt, err1 := enc.DecodeString(parts[4])
	key, err2 := enc.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(salt) < 8 || len(key) < 16 {
		return false, fmt.Errorf("%w: argon2id salt or key", acl.ErrInvalidHash)
	}
	got := argon2.IDKey(password, salt, t, m, p, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

// AddUser stores a new sign-in user. The ID must pass contract.ValidateLevel; an
// existing one gives ErrExists.
func (s *Store) AddUser(ctx context.Context, id string, password []byte) (_ User, err error) {
	defer mapWriteErr(&err)
	if err := contract.ValidateLevel(id); err != nil {
		return User{}, fmt.Errorf("user: %w", err)
	}
	hash, err := s.hashUserPassword(ctx, password)
	if err != nil {
		return User{}, fmt.Errorf("user %s: %w", id, err)
	}
	created, ms := now()
	res, err := s.db.ExecContext(ctx, qInsertUser, id, hash, ms)
	if err != nil {
		return User{}, fmt.Errorf("add user %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return User{}, fmt.Errorf("add user %s: %w", id, err)
	} else if n == 0 {
		return User{}, fmt.Errorf("user %s: %w", id, ErrExists)
	}
	s.log.WithField("user", id).Info("added user")
	return User{ID: id, Created: created}, nil
}

// hashUserPassword checks and hashes a new password under the KDF limiter.
func (s *Store) hashUserPassword(ctx context.Context, password []byte) (string, error) {
	if err := checkNewPassword(password); err != nil {
		return "", err
	}
	if err := s.acquireKDF(ctx); err != nil {
		return "", err
	}
	defer s.releaseKDF()
	return hashArgon2id(password)
}

// ListUsers returns every user, ordered by ID.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	rows, err := s.db.QueryContext(ctx, qListUsers)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	var users []User
	for rows.Next() {
		var u User
		var ms, adm int64
		if err := rows.Scan(&u.ID, &ms, &adm); err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		u.Created, u.Admin = fromMillis(ms), adm != 0
		users = append(users, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return users, nil
}

// SetUserPassword replaces a user's password. An unknown user gives
// ErrNotFound. The user's tokens stay valid: revoke them to end sessions.
func (s *Store) SetUserPassword(ctx context.Context, id string, password []byte) (err error) {
	defer mapWriteErr(&err)
	hash, err := s.hashUserPassword(ctx, password)
	if err != nil {
		return fmt.Errorf("user %s: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, qSetUserPassword, id, hash)
	if err != nil {
		return fmt.Errorf("set password of user %s: %w", id, err)
	}
	if err := mustAffect(res); err != nil {
		return fmt.Errorf("user %s: %w", id, err)
	}
	s.log.WithField("user", id).Info("changed user password")
	return nil
}

// SetUserAdmin grants (on) or takes back the console's admin role. An
// unknown user gives ErrNotFound. Their open console sessions see the
// change at their next request (UserState).
func (s *Store) SetUserAdmin(ctx context.Context, id string, on bool) (err error) {
	defer mapWriteErr(&err)
	v := 0
	if on {
		v = 1
	}
	res, err := s.db.ExecContext(ctx, qSetUserAdmin, id, v)
	if err != nil {
		return fmt.Errorf("set admin of user %s: %w", id, err)
	}
	if err := mustAffect(res); err != nil {
		return fmt.Errorf("user %s: %w", id, err)
	}
	s.log.WithFields(logrus.Fields{"user": id, "admin": on}).Info("changed user admin role")
	return nil
}

// UserState reads what a console session of user id depends on, in one
// indexed row read and no KDF: cheap enough for every request. An unknown
// user gives ErrNotFound.
func (s *Store) UserState(ctx context.Context, id string) (UserState, error) {
	var adm int64
	var hash string
	err := s.db.QueryRowContext(ctx, qSelectUserState, id).Scan(&adm, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return UserState{}, fmt.Errorf("user %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return UserState{}, fmt.Errorf("user %s: %w", id, err)
	}
	sum := sha256.Sum256([]byte(hash))
	return UserState{Admin: adm != 0, PasswordStamp: hex.EncodeToString(sum[:16])}, nil
}

// RemoveUser removes a user and ends all their access at once: every token
// with their user ID (personal or minted by a consent) and every OAuth
// grant is revoked. An unknown user gives ErrNotFound.
func (s *Store) RemoveUser(ctx context.Context, id string) (revoked int, err error) {
	defer mapWriteErr(&err)
	defer s.tokens.invalidateAll() // after the write (see tokenCache.invalidate)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("remove user %s: %w", id, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, qDeleteUser, id)
	if err != nil {
		return 0, fmt.Errorf("remove user %s: %w", id, err)
	}
	if err := mustAffect(res); err != nil {
		return 0, fmt.Errorf("user %s: %w", id, err)
	}
	_, ms := now()
	res, err = tx.ExecContext(ctx, qRevokeTokensOfUser, id, ms)
	if err != nil {
		return 0, fmt.Errorf("remove user %s: revoke tokens: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("remove user %s: revoke tokens: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, qRevokeGrantsOfUser, id, ms); err != nil {
		return 0, fmt.Errorf("remove user %s: revoke grants: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("remove user %s: %w", id, err)
	}
	s.log.WithFields(logrus.Fields{"user": id, "tokens_revoked": n}).Info("removed user")
	return int(n), nil
}

// VerifyUser checks a sign-in. An unknown user and a wrong password both
// give ErrBadCredentials, after the same KDF work. Other errors (the
// database, the context) do not wrap it.
func (s *Store) VerifyUser(ctx context.Context, id string, password []byte) error {
	var hash string
	err := s.db.QueryRowContext(ctx, qSelectUserHash, id).Scan(&hash)
	known := err == nil
	switch {
	case errors.Is(err, sql.ErrNoRows):
		hash = s.dummyUserHash
	case err != nil:
		return fmt.Errorf("sign-in of %s: %w", id, err)
	}
	if len(password) > MaxPasswordLen {
		return ErrBadCredentials
	}
	if err := s.acquireKDF(ctx); err != nil {
		return err
	}
	ok, err := verifyArgon2id(hash, password)
	s.releaseKDF()
	s.kdfRuns.Add(1)
	if err != nil {
		s.log.WithField("user", id).WithError(err).Error("stored password hash is unusable; set a new password")
		return ErrBadCredentials
	}
	if !ok || !known {
		return ErrBadCredentials
	}
	return nil
}
