package acl

import (
	"crypto/pbkdf2"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mosquittoVectors are lines written by mosquitto_passwd (Mosquitto 2.0,
// sha512-pbkdf2, its fixed 101 iterations) with the passwords that made them.
// The first was made here with Debian's mosquitto 2.0.11
// (`mosquitto_passwd -c -b f toolbus 'correct horse battery staple'`); the
// others come from public password files whose plain-text passwords were
// published beside them, and were checked against Python's hashlib.
var mosquittoVectors = []struct {
	password string
	encoded  string
}{
	{"correct horse battery staple", "$7$101$jhdi/P6Qxjxkralv$SZIjHpDdEk5H/SzJ4oFu4E+EhJltvOxVYyGIlsm8gQP+WNVBG7o/RTIBcDIdjYpva0oal39RUdAhgzYYsI8Hew=="},
	{"juanPasswd", "$7$101$MKELi4uwM9Bytcy2$tfAMpvDhzECPRmazv/sKZ5o2/3lNPUoDb8LttKI1EVsJKhdL0BVzRIcUctFEF34GFAA+SitJ9j46NyZpdICQiA=="},
	{"pepinPass", "$7$101$tIVbHwY3dhGAfGGS$/IGerQHGTWsQIw2bK0POJYVMNZOwOlMk+Uxl8T6c8uKa5vKJAn5kWJMLFtNRd8YTS5WDe+cJdzsEPsMjNyY9Dw=="},
	{"robots", "$7$101$TdwP4Y1uJ+tFo9Bn$84rK4XGZEuBmuKJHABOT4pQOzQQPX2LIhN/m/kLG6OgxT+vS8w6vCofgzd7YonvcKXTGIwK5tFe6nAWLpCT4Ow=="},
}

func TestVerifyPasswordMosquittoVectors(t *testing.T) {
	for _, v := range mosquittoVectors {
		t.Run(v.password, func(t *testing.T) {
			ok, err := VerifyPassword(v.encoded, []byte(v.password))
			if err != nil || !ok {
				t.Fatalf("VerifyPassword(right password) = %v, %v; want true, nil", ok, err)
			}
			ok, err = VerifyPassword(v.encoded, []byte(v.password+"x"))
			if err != nil || ok {
				t.Fatalf("VerifyPassword(wrong password) = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

func TestHashPasswordFormat(t *testing.T) {
	enc, err := HashPassword([]byte("s3cret"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(enc, "$")
	if len(parts) != 5 || parts[0] != "" || parts[1] != "7" || parts[2] != "1000" {
		t.Fatalf("hash %q: want $7$1000$<salt>$<hash>", enc)
	}
	// Exactly what mosquitto_passwd writes: padded standard base64, 12-byte
	// salt (16 chars) and 64-byte hash (88 chars ending in "==").
	if len(parts[3]) != 16 || len(parts[4]) != 88 || !strings.HasSuffix(parts[4], "==") {
		t.Fatalf("hash %q: salt/hash encodings have the wrong length", enc)
	}
	for _, p := range parts[3:] {
		if _, err := base64.StdEncoding.Strict().DecodeString(p); err != nil {
			t.Fatalf("hash %q: %q is not standard base64: %v", enc, p, err)
		}
	}
	again, err := HashPassword([]byte("s3cret"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if again == enc {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
}

func TestHashPasswordRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		password []byte
	}{
		{"ascii", []byte("hunter2")},
		{"utf8", []byte("pässwörd ✓")},
		{"binary", []byte{0xff, 0x01, 0x80, 0x7f}},
		{"long", []byte(strings.Repeat("x", 1024))},
		{"empty", []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := HashPassword(tc.password, 500)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := VerifyPassword(enc, tc.password); err != nil || !ok {
				t.Fatalf("VerifyPassword(same) = %v, %v; want true, nil", ok, err)
			}
			wrong := append([]byte("x"), tc.password...)
			if ok, err := VerifyPassword(enc, wrong); err != nil || ok {
				t.Fatalf("VerifyPassword(wrong) = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

// TestHashPasswordDefaultIterations runs the KDF once at the production cost.
func TestHashPasswordDefaultIterations(t *testing.T) {
	start := time.Now()
	enc, err := HashPassword([]byte("correct horse battery staple"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("HashPassword at %d iterations took %v", DefaultHashIterations, time.Since(start))
	if !strings.HasPrefix(enc, "$7$"+strconv.Itoa(DefaultHashIterations)+"$") {
		t.Fatalf("hash %q does not carry the default iteration count", enc)
	}
	if ok, err := VerifyPassword(enc, []byte("correct horse battery staple")); err != nil || !ok {
		t.Fatalf("VerifyPassword = %v, %v; want true, nil", ok, err)
	}
}

func TestHashPasswordBadIterations(t *testing.T) {
	for _, n := range []int{-1, MaxHashIterations + 1} {
		if _, err := HashPassword([]byte("x"), n); err == nil {
			t.Errorf("HashPassword(iterations %d): no error", n)
		}
	}
}

func TestVerifyPasswordTampered(t *testing.T) {
	v := mosquittoVectors[0]
	parts := strings.Split(v.encoded, "$") // "", "7", iterations, salt, hash
	flip := func(s string) string {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		b[0] ^= 1
		return base64.StdEncoding.EncodeToString(b)
	}
	join := func(iter, salt, hash string) string { return "$7$" + iter + "$" + salt + "$" + hash }
	for _, tc := range []struct {
		name, encoded string
	}{
		{"hash bit", join(parts[2], parts[3], flip(parts[4]))},
		{"salt bit", join(parts[2], flip(parts[3]), parts[4])},
		{"iterations", join("102", parts[3], parts[4])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := VerifyPassword(tc.encoded, []byte(v.password))
			if err != nil || ok {
				t.Fatalf("VerifyPassword = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

func TestVerifyPasswordMalformed(t *testing.T) {
	v := mosquittoVectors[0]
	parts := strings.Split(v.encoded, "$")
	salt, hash := parts[3], parts[4]
	for _, tc := range []struct {
		name, encoded string
	}{
		{"empty", ""},
		{"plain text", "correct horse battery staple"},
		{"sha512 type 6", "$6$" + salt + "$" + hash},
		{"missing hash", "$7$101$" + salt},
		{"extra field", "$7$101$" + salt + "$" + hash + "$x"},
		{"zero iterations", "$7$0$" + salt + "$" + hash},
		{"negative iterations", "$7$-5$" + salt + "$" + hash},
		{"signed iterations", "$7$+101$" + salt + "$" + hash},
		{"huge iterations", "$7$99999999999$" + salt + "$" + hash},
		{"too many iterations", "$7$" + strconv.Itoa(MaxHashIterations+1) + "$" + salt + "$" + hash},
		{"short salt", "$7$101$" + base64.StdEncoding.EncodeToString(make([]byte, 11)) + "$" + hash},
		{"short hash", "$7$101$" + salt + "$" + base64.StdEncoding.EncodeToString(make([]byte, 63))},
		{"bad base64", "$7$101$" + salt + "$" + strings.Repeat("*", 88)},
		{"newline in hash", "$7$101$" + salt + "$" + hash[:40] + "\n" + hash[40:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := VerifyPassword(tc.encoded, []byte(v.password))
			if ok || !errors.Is(err, ErrInvalidHash) {
				t.Fatalf("VerifyPassword = %v, %v; want false, ErrInvalidHash", ok, err)
			}
		})
	}
}

func TestVerifyPasswordLenientEncodings(t *testing.T) {
	v := mosquittoVectors[0]
	t.Run("unpadded base64", func(t *testing.T) {
		ok, err := VerifyPassword(strings.TrimRight(v.encoded, "="), []byte(v.password))
		if err != nil || !ok {
			t.Fatalf("VerifyPassword = %v, %v; want true, nil", ok, err)
		}
	})
	t.Run("64-byte salt", func(t *testing.T) {
		// Newer mosquitto_passwd writes a salt as long as the hash.
		salt := make([]byte, 64)
		for i := range salt {
			salt[i] = byte(i)
		}
		enc := hashWithSalt(t, []byte("pw"), salt, 101)
		if ok, err := VerifyPassword(enc, []byte("pw")); err != nil || !ok {
			t.Fatalf("VerifyPassword = %v, %v; want true, nil", ok, err)
		}
	})
}

// hashWithSalt is HashPassword with a chosen salt.
func hashWithSalt(t *testing.T, password, salt []byte, iterations int) string {
	t.Helper()
	dk, err := pbkdf2.Key(sha512.New, string(password), salt, iterations, hashLen)
	if err != nil {
		t.Fatal(err)
	}
	return encodeHash(iterations, salt, dk)
}

func TestUnmatchableHash(t *testing.T) {
	h, err := UnmatchableHash(1000)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$7$1000$") {
		t.Fatalf("UnmatchableHash(1000) = %q, want iterations 1000", h)
	}
	for _, pw := range []string{"", "x", "password"} {
		if ok, err := VerifyPassword(h, []byte(pw)); ok || err != nil {
			t.Fatalf("VerifyPassword(unmatchable, %q) = %v, %v; want false, nil", pw, ok, err)
		}
	}
	if again, _ := UnmatchableHash(1000); again == h {
		t.Fatal("two unmatchable hashes are equal: the salt is not random")
	}
}
