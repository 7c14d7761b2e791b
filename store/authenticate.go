package store

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
)

// authEntry remembers one successful login: the stored hash it was checked
// against and an HMAC of the password under the per-process key. Keying on
// the stored hash means a password change (new salt, new hash) misses even
// before forgetLogin runs; the password itself is never kept.
type authEntry struct {
	hash string
	mac  [sha256.Size]byte
}

// Authenticate checks a login. Unknown user and wrong password both give
// ErrBadCredentials, after the same amount of KDF work. A disabled identity
// gives ErrDisabled, but only to a caller who knows its password, so that
// the error does not reveal which usernames exist.
//
// Recent successful verifications are cached (see StoreOptions.AuthCacheSize)
// so that reconnecting clients do not pay the KDF again; a password change
// or a removal invalidates the entry. The KDF does not stop halfway for ctx,
// but waiting for a KDF slot does.
func (s *Store) Authenticate(ctx context.Context, username string, password []byte) (acl.Identity, error) {
	if err := ctx.Err(); err != nil {
		return acl.Identity{}, err
	}
	if id, ok, err := s.AuthenticateCached(ctx, username, password); ok || err != nil {
		return id, err
	}
	var (
		id   acl.Identity
		hash string
	)
	if contract.ValidLevel(username) {
		var err error
		id, hash, err = s.login(ctx, username)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return acl.Identity{}, err
		}
	}
	if hash == "" {
		// Unknown (or impossible) username: burn the same work as a real check.
		if err := s.verify(ctx, s.dummyHash, password); err != nil && !errors.Is(err, ErrBadCredentials) {
			return acl.Identity{}, err
		}
		return acl.Identity{}, ErrBadCredentials
	}

	mac := s.passwordMAC(username, password)
	if !s.cachedLogin(username, hash, mac) {
		if err := s.verify(ctx, hash, password); err != nil {
			if errors.Is(err, acl.ErrInvalidHash) {
				s.log.WithField("username", username).WithError(err).Error("stored password hash is unusable; reset the password")
				return acl.Identity{}, ErrBadCredentials
			}
			return acl.Identity{}, err
		}
		s.rememberLogin(username, hash, mac)
	}
	if id.Disabled {
		return acl.Identity{}, fmt.Errorf("identity %s: %w", username, ErrDisabled)
	}
	return id, nil
}

// AuthenticateCached is Authenticate without the KDF: it checks a login
// against the recent successful ones only. ok is false when they cannot
// tell (the caller then calls Authenticate, which spends the KDF); with ok
// true, the result is Authenticate's. A broker calls it before it queues a
// login for the KDF, so that clients that reconnect never wait behind
// password guesses.
func (s *Store) AuthenticateCached(ctx context.Context, username string, password []byte) (id acl.Identity, ok bool, err error) {
	if s.authCache == nil || !contract.ValidLevel(username) {
		return acl.Identity{}, false, nil
	}
	id, hash, err := s.login(ctx, username)
	switch {
	case errors.Is(err, ErrNotFound):
		return acl.Identity{}, false, nil
	case err != nil:
		return acl.Identity{}, false, err
	case !s.cachedLogin(username, hash, s.passwordMAC(username, password)):
		return acl.Identity{}, false, nil
	case id.Disabled:
		return acl.Identity{}, true, fmt.Errorf("identity %s: %w", username, ErrDisabled)
	}
	return id, true, nil
}

// verify checks password against hash under the KDF limiter: nil on a
// match, ErrBadCredentials on a mismatch.
func (s *Store) verify(ctx context.Context, hash string, password []byte) error {
	if err := s.acquireKDF(ctx); err != nil {
		return err
	}
	s.kdfRuns.Add(1)
	ok, err := acl.VerifyPassword(hash, password)
	s.releaseKDF()
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrBadCredentials
	}
	return nil
}

// login reads what Authenticate needs of one identity.
func (s *Store) login(ctx context.Context, username string) (acl.Identity, string, error) {
	var (
		id       acl.Identity
		role     string
		disabled int64
		ms       int64
		hash     string
	)
	err := s.db.QueryRowContext(ctx, qSelectLogin, username).Scan(&id.Username, &role, &disabled, &ms, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return acl.Identity{}, "", ErrNotFound
	}
	if err != nil {
		return acl.Identity{}, "", fmt.Errorf("authenticate %s: %w", username, err)
	}
	id.Role, id.Disabled, id.Created = acl.Role(role), disabled != 0, fromMillis(ms)
	return id, hash, nil
}

func (s *Store) passwordMAC(username string, password []byte) (sum [sha256.Size]byte) {
	if s.authCache == nil {
		return sum
	}
	h := hmac.New(sha256.New, s.authKey)
	// Usernames are valid levels (no NUL), so the separator keeps
	// ("ab", "c") and ("a", "bc") apart.
	h.Write([]byte(username))
	h.Write([]byte{0})
	h.Write(password)
	h.Sum(sum[:0])
	return sum
}

func (s *Store) cachedLogin(username, hash string, mac [sha256.Size]byte) bool {
	if s.authCache == nil {
		return false
	}
	s.authMu.Lock()
	e, ok := s.authCache.Get(username)
	s.authMu.Unlock()
	return ok && e.hash == hash && hmac.Equal(e.mac[:], mac[:])
}

func (s *Store) rememberLogin(username, hash string, mac [sha256.Size]byte) {
	if s.authCache == nil {
		return
	}
	s.authMu.Lock()
	s.authCache.Add(username, authEntry{hash: hash, mac: mac})
	s.authMu.Unlock()
}

func (s *Store) forgetLogin(username string) {
	if s.authCache == nil {
		return
	}
	s.authMu.Lock()
	s.authCache.Remove(username)
	s.authMu.Unlock()
}
