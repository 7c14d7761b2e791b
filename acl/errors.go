package acl

import "errors"

var (
	// ErrNotFound is returned when the identity or rule named in a call does
	// not exist.
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
	// Mosquitto would silently cut the password at).
	ErrInvalidPassword = errors.New("invalid password")
	// ErrInvalidHash is returned when an encoded password hash is not a
	// well-formed Mosquitto "$7$" hash.
	ErrInvalidHash = errors.New("invalid password hash")
	// ErrInvalidRule is returned when a rule cannot be stored: unknown
	// access, a malformed MQTT filter, a filter that starts with '$', or one
	// that could reach the reserved ff/v1/mcp/ tree.
	ErrInvalidRule = errors.New("invalid rule")
)
