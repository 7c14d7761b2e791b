package acl

import "errors"

var (
	// ErrInvalidRule is returned when a rule cannot be enforced or stored:
	// unknown access, a username that is not a valid level, a malformed MQTT
	// filter, a filter that starts with '$', or one that could reach the
	// reserved ff/v2/ or ff/v1/mcp/ trees.
	ErrInvalidRule = errors.New("invalid rule")
	// ErrInvalidHash is returned when an encoded password hash is not
	// well-formed: not a Mosquitto "$7$" hash (VerifyPassword), or not the
	// argon2id string the store keeps for a sign-in user.
	ErrInvalidHash = errors.New("invalid password hash")
)
