package store

import "errors"

var (
	// ErrNotFound is returned when the identity, rule or token named in a
	// call does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists is returned when an identity with the same username, or a
	// rule with the same username, access and filter, is already stored.
	ErrExists = errors.New("already exists")
	// ErrBadCredentials is returned by Authenticate for an unknown username
	// and for a wrong password alike, so that a caller cannot tell which.
	ErrBadCredentials = errors.New("bad credentials")
	// ErrDisabled is returned by Authenticate when the password is right but
	// the identity has been disabled.
	ErrDisabled = errors.New("identity disabled")
	// ErrInvalidPassword is returned when a new password cannot be stored:
	// it is empty, longer than MaxPasswordLen, or holds a NUL byte (which
	// Mosquitto would silently cut the password at). A malformed stored
	// hash is acl.ErrInvalidHash.
	ErrInvalidPassword = errors.New("invalid password")
	// ErrInvalidTokenSpec is returned by CreateToken when the TokenSpec
	// cannot be stored: a user that is not a valid level, a bad or empty
	// scope list, a bad entity, a negative TTL or an unprintable name.
	ErrInvalidTokenSpec = errors.New("invalid token spec")
	// ErrInvalidScope is returned by ValidateScope for a string that cannot
	// be a scope.
	ErrInvalidScope = errors.New("invalid scope")

	// ErrUnauthenticated is wrapped by every refusal of AuthenticateToken, so
	// that a caller maps them all to 401 with one errors.Is.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrTokenInvalid is returned by AuthenticateToken for a secret that is
	// malformed, unknown, or wrong for its token ID. It wraps
	// ErrUnauthenticated.
	ErrTokenInvalid error = &authError{"invalid token"}
	// ErrTokenExpired is returned by AuthenticateToken for a token past its
	// expiry. It wraps ErrUnauthenticated.
	ErrTokenExpired error = &authError{"token expired"}
	// ErrTokenRevoked is returned by AuthenticateToken for a revoked token.
	// It wraps ErrUnauthenticated.
	ErrTokenRevoked error = &authError{"token revoked"}
)

// authError is a refusal of a credential: its own message, and
// ErrUnauthenticated for errors.Is.
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }
func (e *authError) Unwrap() error { return ErrUnauthenticated }
