package store

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"golang.org/x/crypto/bcrypt"
)

// narrowToOneConn makes s use a single database connection and runs pragma
// on it, so that the pragma holds for every statement the store runs next.
func narrowToOneConn(t *testing.T, s *Store, pragma string) {
	t.Helper()
	s.db.SetMaxOpenConns(1)
	if _, err := s.db.ExecContext(testContext(t), pragma); err != nil {
		t.Fatalf("%s: %v", pragma, err)
	}
}

// TestStoreRefusesWritesKeepsReads: when SQLite refuses writes (read-only:
// PRAGMA query_only; full: PRAGMA max_page_count at the current size, the
// same SQLITE_READONLY and SQLITE_FULL a read-only file or a full disk
// give), every write fails with ErrStoreReadOnly or ErrStoreFull and a
// message that says so, while token authentication, MQTT logins and lists
// keep working.
func TestStoreRefusesWritesKeepsReads(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T, s *Store)
		want   error
		phrase string
		writes int // how many of the writes below must fail: a full disk lets deletes through
	}{
		{"read-only", func(t *testing.T, s *Store) { narrowToOneConn(t, s, "PRAGMA query_only = 1") },
			ErrStoreReadOnly, "read-only", 8},
		{"full", func(t *testing.T, s *Store) {
			narrowToOneConn(t, s, "PRAGMA max_page_count = 1") // clamps to the current size
			// Fill the free space the tables' last pages still have, with
			// rows no larger than the ones the writes below add.
			fill(t, "tokens", func(i int) error {
				_, _, err := s.CreateToken(testContext(t), TokenSpec{UserID: "bob"})
				return err
			})
			fill(t, "identities", func(i int) error {
				_, err := s.AddIdentity(testContext(t), fmt.Sprintf("f%05d", i), acl.RoleExpertAgent, []byte("agent-password-2"))
				return err
			})
		}, ErrStoreFull, "full", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t, StoreOptions{TokenCacheTTL: -1}) // every authentication reads the database
			ctx := testContext(t)
			addTestIdentity(t, s, "agent", acl.RoleExpertAgent, "agent-password-1")
			rule, err := s.AddRule(ctx, acl.Rule{Username: "agent", Access: acl.AccessRead, Filter: "a/#"})
			if err != nil {
				t.Fatal(err)
			}
			secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
			c.setup(t, s)

			writes := []struct {
				name string
				f    func() error
			}{
				{"CreateToken", func() error { _, _, err := s.CreateToken(ctx, TokenSpec{UserID: "bob"}); return err }},
				{"AddIdentity", func() error {
					_, err := s.AddIdentity(ctx, "agent2", acl.RoleExpertAgent, []byte("agent-password-2"))
					return err
				}},
				{"AddRule", func() error {
					_, err := s.AddRule(ctx, acl.Rule{Username: "agent", Access: acl.AccessWrite, Filter: "b/#"})
					return err
				}},
				{"SetPassword", func() error { return s.SetPassword(ctx, "agent", []byte("agent-password-3")) }},
				{"SetDisabled", func() error { return s.SetDisabled(ctx, "agent", true) }},
				{"RevokeToken", func() error { return s.RevokeToken(ctx, tok.ID) }},
				{"RemoveRule", func() error { return s.RemoveRule(ctx, rule.ID) }},
				{"RemoveIdentity", func() error { return s.RemoveIdentity(ctx, "agent") }},
			}
			for _, w := range writes[:c.writes] {
				err := w.f()
				if !errors.Is(err, c.want) {
					t.Errorf("%s: err = %v, want %v", w.name, err, c.want)
					continue
				}
				if !strings.Contains(err.Error(), c.phrase) || !strings.Contains(err.Error(), "reads still work") {
					t.Errorf("%s: message %q does not say what happened", w.name, err)
				}
			}

			// Reads: the token authenticates (its LastUsed write fails in
			// the background and is only logged), the identity logs in,
			// the lists answer.
			for range 3 {
				got, err := s.AuthenticateToken(ctx, secret)
				if err != nil || got.ID != tok.ID {
					t.Fatalf("AuthenticateToken: %v, %v", got.ID, err)
				}
			}
			if _, err := s.Authenticate(ctx, "agent", []byte("agent-password-1")); err != nil {
				t.Fatalf("Authenticate: %v", err)
			}
			if _, err := s.ListTokens(ctx, ""); err != nil {
				t.Fatalf("ListTokens: %v", err)
			}
			if _, err := s.ListRules(ctx); err != nil {
				t.Fatalf("ListRules: %v", err)
			}
			if _, err := s.ListIdentities(ctx); err != nil {
				t.Fatalf("ListIdentities: %v", err)
			}
		})
	}
}

// fill runs write until the store is full, at most 10000 times.
func fill(t *testing.T, what string, write func(i int) error) {
	t.Helper()
	for i := range 10000 {
		if err := write(i); err != nil {
			if !errors.Is(err, ErrStoreFull) {
				t.Fatalf("filling %s: write %d: %v", what, i, err)
			}
			return
		}
	}
	t.Fatalf("filling %s: 10000 writes fitted under max_page_count", what)
}

// TestClassifyWriteErr: the errors a read-only or full data directory gives,
// from SQLite and from the operating system, map to the sentinels; others
// pass unchanged.
func TestClassifyWriteErr(t *testing.T) {
	// A real SQLITE_READONLY: a write through a read-only SQLite URI.
	path := filepath.Join(t.TempDir(), "ro.db")
	rw, err := sql.Open("sqlite", dsn(path, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	rw.Close()
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, sqliteRO := ro.Exec(`INSERT INTO t VALUES (1)`)
	if sqliteRO == nil {
		t.Fatal("insert through mode=ro succeeded")
	}

	cases := []struct {
		name string
		err  error
		want error // nil: unchanged
	}{
		{"sqlite read-only", fmt.Errorf("create token: %w", sqliteRO), ErrStoreReadOnly},
		{"read-only file system", &fs.PathError{Op: "open", Path: "/d/toolbus.db", Err: syscall.EROFS}, ErrStoreReadOnly},
		{"permission", &fs.PathError{Op: "open", Path: "/d/toolbus.db", Err: syscall.EACCES}, ErrStoreReadOnly},
		{"no space", &fs.PathError{Op: "write", Path: "/d/toolbus.db", Err: syscall.ENOSPC}, ErrStoreFull},
		{"quota", &fs.PathError{Op: "write", Path: "/d/toolbus.db", Err: syscall.EDQUOT}, ErrStoreFull},
		{"not found", ErrNotFound, nil},
		{"exists", fmt.Errorf("identity a: %w", ErrExists), nil},
		{"other", errors.New("boom"), nil},
		{"nil", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classifyWriteErr(c.err)
			if c.want == nil {
				if got != c.err {
					t.Fatalf("classifyWriteErr(%v) = %v, want it unchanged", c.err, got)
				}
				return
			}
			if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
				t.Fatalf("classifyWriteErr(%v) = %v, want %v wrapping the cause", c.err, got, c.want)
			}
			if again := classifyWriteErr(got); again != got {
				t.Fatalf("classified twice: %v", again)
			}
		})
	}
}

// TestOpenReadOnlyDataDir: a store whose database file cannot be opened
// for writing refuses to open with ErrStoreReadOnly. Root writes through
// file modes, so the case needs another user.
func TestOpenReadOnlyDataDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root, which file modes do not stop; integration/faults_store_test.go covers this as another user")
	}
	dir := t.TempDir()
	s := openTestStoreIn(t, dir, StoreOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, DBFileName), 0o400); err != nil {
		t.Fatal(err)
	}
	_, err := Open(testContext(t), dir, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if !errors.Is(err, ErrStoreReadOnly) {
		t.Fatalf("Open on a read-only database file: %v, want ErrStoreReadOnly", err)
	}
}
