package store

import (
	"context"
	"fmt"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/acl"
)

const (
	// MaxPasswordLen is the longest password the store accepts, of an MQTT
	// identity or of a sign-in user.
	MaxPasswordLen = 1024
	// DefaultBcryptCost is the cost of the bcrypt hashes the store keeps
	// for NATS when StoreOptions.BcryptCost is 0.
	DefaultBcryptCost = 11

	// bcryptMaxPassword is the longest password bcrypt hashes.
	bcryptMaxPassword = 72
)

// hashNew hashes a new password under the KDF limiter: the "$7$" hash the
// broker verifies, and the bcrypt one acl.NATSExport writes ("" if none is
// kept).
func (s *Store) hashNew(ctx context.Context, password []byte) (hash, bhash string, err error) {
	if err := checkNewPassword(password); err != nil {
		return "", "", err
	}
	if err := s.acquireKDF(ctx); err != nil {
		return "", "", err
	}
	defer s.releaseKDF()
	if hash, err = acl.HashPassword(password, s.iters); err != nil {
		return "", "", err
	}
	// bcrypt reads at most 72 bytes: a longer password gets no bcrypt
	// hash (acl.NATSExport leaves its identity out, and says why).
	if s.bcost > 0 && len(password) <= bcryptMaxPassword {
		b, err := bcrypt.GenerateFromPassword(password, s.bcost)
		if err != nil {
			return "", "", fmt.Errorf("bcrypt: %w", err)
		}
		bhash = string(b)
	}
	return hash, bhash, nil
}

// checkNewPassword refuses passwords that cannot be stored faithfully.
func checkNewPassword(password []byte) error {
	switch {
	case len(password) == 0:
		return fmt.Errorf("%w: empty", ErrInvalidPassword)
	case len(password) > MaxPasswordLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidPassword, len(password), MaxPasswordLen)
	}
	for _, c := range password {
		if c == 0 {
			return fmt.Errorf("%w: holds a NUL byte", ErrInvalidPassword)
		}
	}
	return nil
}
