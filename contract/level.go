package contract

import (
	"errors"
	"fmt"
)

// MaxLevelLen is the longest topic level toolbus accepts from a client.
const MaxLevelLen = 128

// ErrInvalidLevel is returned when a value cannot be used as one level of an
// MQTT topic: it is empty, longer than MaxLevelLen, or holds a character
// outside [A-Za-z0-9_-]. Such values (with "/", "+", "#", NUL or a leading
// "$") would let one caller read or forge another caller's traffic.
var ErrInvalidLevel = errors.New("invalid topic level")

// ValidateLevel reports whether s may be placed verbatim in a topic level. It
// returns an error wrapping ErrInvalidLevel that names the reason.
func ValidateLevel(s string) error {
	if len(s) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidLevel)
	}
	if len(s) > MaxLevelLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidLevel, len(s), MaxLevelLen)
	}
	for i := 0; i < len(s); i++ {
		if !levelByte(s[i]) {
			return fmt.Errorf("%w: byte %q at offset %d (allowed: A-Z a-z 0-9 _ -)", ErrInvalidLevel, s[i], i)
		}
	}
	return nil
}

// ValidLevel is ValidateLevel as a boolean, for hot paths that do not need the reason.
func ValidLevel(s string) bool {
	if len(s) == 0 || len(s) > MaxLevelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !levelByte(s[i]) {
			return false
		}
	}
	return true
}

func levelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
