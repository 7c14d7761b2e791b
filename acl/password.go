package acl

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Mosquitto 2's "$7$" password hash: PBKDF2-HMAC-SHA512 written as
// "$7$<iterations>$<base64 salt>$<base64 hash>" with standard, padded base64
// (what mosquitto_passwd writes through OpenSSL's BIO_f_base64 without
// newlines). Mosquitto 2.0 refuses a salt other than 12 bytes or a hash other
// than 64 bytes when it loads a password file, so those are what we write.
const (
	// DefaultHashIterations is the PBKDF2 iteration count of new hashes when
	// none is given (OWASP's 2023 advice for PBKDF2-HMAC-SHA512).
	DefaultHashIterations = 210000
	// MaxHashIterations bounds the iteration count VerifyPassword accepts,
	// so a tampered hash cannot make one login burn minutes of CPU.
	MaxHashIterations = 10_000_000

	hashPrefix  = "$7$"
	saltLen     = 12
	longSaltLen = 64 // newer mosquitto_passwd writes a salt as long as the hash
	hashLen     = 64
)

// HashPassword derives a new "$7$" hash of password with a random salt.
// iterations 0 means DefaultHashIterations.
func HashPassword(password []byte, iterations int) (string, error) {
	if iterations == 0 {
		iterations = DefaultHashIterations
	}
	if iterations < 1 || iterations > MaxHashIterations {
		return "", fmt.Errorf("hash iterations %d: want 1..%d", iterations, MaxHashIterations)
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	dk, err := pbkdf2.Key(sha512.New, string(password), salt, iterations, hashLen)
	if err != nil {
		return "", fmt.Errorf("pbkdf2: %w", err)
	}
	return encodeHash(iterations, salt, dk), nil
}

// UnmatchableHash returns a well-formed hash at iterations that no password
// matches: a random salt and a random "derived key". Checking a login for an
// unknown username against it costs what checking a wrong password costs, so
// that the time a refusal takes does not tell which usernames exist.
func UnmatchableHash(iterations int) (string, error) {
	b := make([]byte, saltLen+hashLen)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("unmatchable hash: %w", err)
	}
	return encodeHash(iterations, b[:saltLen], b[saltLen:]), nil
}

func encodeHash(iterations int, salt, dk []byte) string {
	enc := base64.StdEncoding
	return hashPrefix + strconv.Itoa(iterations) + "$" + enc.EncodeToString(salt) + "$" + enc.EncodeToString(dk)
}

// VerifyPassword reports whether password matches the "$7$" hash encoded.
// A wrong password gives (false, nil); a malformed hash gives an error
// wrapping ErrInvalidHash. The derived keys are compared in constant time.
func VerifyPassword(encoded string, password []byte) (bool, error) {
	p, err := parseHash(encoded)
	if err != nil {
		return false, err
	}
	dk, err := pbkdf2.Key(sha512.New, string(password), p.salt, p.iterations, hashLen)
	if err != nil {
		return false, fmt.Errorf("pbkdf2: %w", err)
	}
	return subtle.ConstantTimeCompare(dk, p.hash) == 1, nil
}

type parsedHash struct {
	iterations int
	salt, hash []byte
}

func parseHash(encoded string) (parsedHash, error) {
	rest, ok := strings.CutPrefix(encoded, hashPrefix)
	if !ok {
		// Do not echo the value: it may be a plain-text password by mistake.
		return parsedHash{}, fmt.Errorf("%w: not a Mosquitto $7$ (PBKDF2-SHA512) hash", ErrInvalidHash)
	}
	iterStr, rest, ok1 := strings.Cut(rest, "$")
	saltStr, hashStr, ok2 := strings.Cut(rest, "$")
	if !ok1 || !ok2 {
		return parsedHash{}, fmt.Errorf("%w: want $7$<iterations>$<salt>$<hash>", ErrInvalidHash)
	}
	if !allDigits(iterStr) || len(iterStr) > 9 {
		return parsedHash{}, fmt.Errorf("%w: bad iteration count", ErrInvalidHash)
	}
	iterations, _ := strconv.Atoi(iterStr)
	if iterations < 1 || iterations > MaxHashIterations {
		return parsedHash{}, fmt.Errorf("%w: iteration count %d outside 1..%d", ErrInvalidHash, iterations, MaxHashIterations)
	}
	salt, err := decodeB64(saltStr)
	if err != nil || (len(salt) != saltLen && len(salt) != longSaltLen) {
		return parsedHash{}, fmt.Errorf("%w: salt must be %d or %d bytes of base64", ErrInvalidHash, saltLen, longSaltLen)
	}
	hash, err := decodeB64(hashStr)
	if err != nil || len(hash) != hashLen {
		return parsedHash{}, fmt.Errorf("%w: hash must be %d bytes of base64", ErrInvalidHash, hashLen)
	}
	return parsedHash{iterations: iterations, salt: salt, hash: hash}, nil
}

// decodeB64 reads standard base64 with or without padding: some tools that
// write Mosquitto password files strip the '='.
func decodeB64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		// The std decoder skips newlines; a hash field never holds them.
		return nil, base64.CorruptInputError(0)
	}
	if strings.HasSuffix(s, "=") {
		return base64.StdEncoding.Strict().DecodeString(s)
	}
	return base64.RawStdEncoding.Strict().DecodeString(s)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
