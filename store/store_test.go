package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
)

// testIterations keeps the KDF fast in tests; one test runs the default.
const testIterations = 1000

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openTestStoreIn(t *testing.T, dir string, opts StoreOptions) *Store {
	t.Helper()
	if opts.HashIterations == 0 {
		opts.HashIterations = testIterations
	}
	if opts.BcryptCost == 0 {
		opts.BcryptCost = bcrypt.MinCost
	}
	s, err := openAny(testContext(t), t, dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func openTestStore(t *testing.T, opts StoreOptions) *Store {
	t.Helper()
	return openTestStoreIn(t, t.TempDir(), opts)
}

func addTestIdentity(t *testing.T, s *Store, username string, role acl.Role, password string) acl.Identity {
	t.Helper()
	id, err := s.AddIdentity(testContext(t), username, role, []byte(password))
	if err != nil {
		t.Fatalf("AddIdentity(%s): %v", username, err)
	}
	return id
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data dir?#x", "nested")
	s := openTestStoreIn(t, dir, StoreOptions{})
	addTestIdentity(t, s, "alice", acl.RolePlatform, "password-1")

	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		t.Errorf("data directory mode %v: want no group/other access", st.Mode().Perm())
	}
	for _, name := range []string{DBFileName, DBFileName + "-wal"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s mode %v: want no group/other access", name, st.Mode().Perm())
		}
	}
	var mode string
	if err := s.db.QueryRowContext(testContext(t), "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

func TestOpenMigratesOnce(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	logger, hook := test.NewNullLogger()
	log := logrus.NewEntry(logger)

	s, err := openAny(ctx, t, dir, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddIdentity(ctx, "alice", acl.RoleClient, []byte("pw-alice-1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, e := range hook.AllEntries() {
		if e.Message == "applied schema migration" {
			applied++
			if e.Data["component"] != "store" {
				t.Errorf("log entry without component=store: %v", e.Data)
			}
		}
	}
	if applied != len(migrations) {
		t.Fatalf("first Open applied %d migrations, want %d", applied, len(migrations))
	}

	hook.Reset()
	s2 := openTestStoreIn(t, dir, StoreOptions{Logger: log})
	if len(hook.AllEntries()) != 0 {
		t.Errorf("second Open logged %d entries, want none (nothing to migrate)", len(hook.AllEntries()))
	}
	if _, err := s2.Identity(ctx, "alice"); err != nil {
		t.Fatalf("identity lost across reopen: %v", err)
	}
	var version int
	if err := s2.db.QueryRowContext(ctx, qSchemaVersion).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if want := migrations[len(migrations)-1].version; version != want {
		t.Fatalf("schema version %d, want %d", version, want)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	s, err := openAny(ctx, t, dir, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, qInsertMigration, 999, "from the future", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openAny(ctx, t, dir, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open error %q does not say the schema is newer", err)
	}
}

func TestOpenBadOptions(t *testing.T) {
	ctx := testContext(t)
	if _, err := Open(ctx, "", StoreOptions{}); err == nil {
		t.Error("Open with an empty data directory succeeded")
	}
	if _, err := Open(ctx, t.TempDir(), StoreOptions{HashIterations: -1}); err == nil {
		t.Error("Open with negative HashIterations succeeded")
	}
}

// TestNumberedPlaceholders pins what queries.go relies on: modernc binds $N
// by ordinal, including a placeholder used twice.
func TestNumberedPlaceholders(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	var a, b string
	var c int64
	err := s.db.QueryRowContext(testContext(t), `SELECT $2, $1, $2 + 0`, "first", int64(7)).Scan(&a, &b, &c)
	if err != nil {
		t.Fatal(err)
	}
	if a != "7" || b != "first" || c != 7 {
		t.Fatalf("got %q %q %d; want \"7\" \"first\" 7", a, b, c)
	}
}

func TestIdentityCRUD(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)

	before := time.Now().Add(-time.Second)
	alice := addTestIdentity(t, s, "alice", acl.RolePlatform, "password-a")
	if alice.Username != "alice" || alice.Role != acl.RolePlatform || alice.Disabled || alice.Created.Before(before) {
		t.Fatalf("AddIdentity = %+v", alice)
	}
	addTestIdentity(t, s, "bob_2", acl.RoleExpertAgent, "password-b")
	addTestIdentity(t, s, "Carol-3", acl.RoleClient, "password-c")

	got, err := s.Identity(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Created.Equal(alice.Created) || got != alice {
		t.Fatalf("Identity = %+v, want %+v", got, alice)
	}

	t.Run("add errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, username string
			role           acl.Role
			password       string
			want           error
		}{
			{"duplicate", "alice", acl.RoleClient, "other-pass", ErrExists},
			{"empty username", "", acl.RoleClient, "pw", contract.ErrInvalidLevel},
			{"slash in username", "a/b", acl.RoleClient, "pw", contract.ErrInvalidLevel},
			{"wildcard username", "+", acl.RoleClient, "pw", contract.ErrInvalidLevel},
			{"empty password", "dave", acl.RoleClient, "", ErrInvalidPassword},
			{"NUL in password", "dave", acl.RoleClient, "a\x00b", ErrInvalidPassword},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := s.AddIdentity(ctx, tc.username, tc.role, []byte(tc.password))
				if !errors.Is(err, tc.want) {
					t.Fatalf("AddIdentity = %v, want %v", err, tc.want)
				}
			})
		}
		if _, err := s.AddIdentity(ctx, "dave", acl.Role("root"), []byte("pw")); err == nil {
			t.Error("AddIdentity with an unknown role succeeded")
		}
	})

	ids, err := s.ListIdentities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, id := range ids {
		names = append(names, id.Username)
	}
	if strings.Join(names, ",") != "Carol-3,alice,bob_2" {
		t.Fatalf("ListIdentities = %v, want Carol-3, alice, bob_2", names)
	}

	if err := s.SetDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Identity(ctx, "alice"); !got.Disabled {
		t.Fatal("SetDisabled(true) did not stick")
	}
	if err := s.SetDisabled(ctx, "alice", true); err != nil {
		t.Fatalf("SetDisabled twice: %v", err)
	}
	if err := s.SetDisabled(ctx, "alice", false); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Identity(ctx, "alice"); got.Disabled {
		t.Fatal("SetDisabled(false) did not stick")
	}

	if err := s.RemoveIdentity(ctx, "bob_2"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Identity":       func() error { _, err := s.Identity(ctx, "bob_2"); return err }(),
		"RemoveIdentity": s.RemoveIdentity(ctx, "bob_2"),
		"SetDisabled":    s.SetDisabled(ctx, "bob_2", true),
		"SetPassword":    s.SetPassword(ctx, "bob_2", []byte("new-password")),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of a removed identity = %v, want ErrNotFound", name, err)
		}
	}
}

func TestPasswordHashes(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RolePlatform, "password-a")
	addTestIdentity(t, s, "bob", acl.RoleExpertAgent, "password-b")
	addTestIdentity(t, s, "eve", acl.RoleClient, "password-e")
	if err := s.SetDisabled(ctx, "eve", true); err != nil {
		t.Fatal(err)
	}
	m, err := s.PasswordHashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 {
		t.Fatalf("PasswordHashes = %v, want alice and bob (eve is disabled)", m)
	}
	for user, pw := range map[string]string{"alice": "password-a", "bob": "password-b"} {
		if ok, err := acl.VerifyPassword(m[user], []byte(pw)); err != nil || !ok {
			t.Errorf("hash of %s does not verify: %v, %v", user, ok, err)
		}
		if !strings.HasPrefix(m[user], "$7$1000$") {
			t.Errorf("hash of %s = %q: want $7$ with the store's iterations", user, m[user])
		}
	}
}

// TestBcryptHashes: a bcrypt hash of each password is kept beside the
// "$7$" one (for NATS), follows a new password, is not listed for a
// disabled identity, and is not kept at all with a negative cost.
func TestBcryptHashes(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RolePlatform, "password-a")
	addTestIdentity(t, s, "eve", acl.RoleClient, "password-e")
	if err := s.SetDisabled(ctx, "eve", true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPassword(ctx, "alice", []byte("password-a2")); err != nil {
		t.Fatal(err)
	}
	m, err := s.BcryptHashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 {
		t.Fatalf("BcryptHashes = %v, want alice alone (eve is disabled)", m)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(m["alice"]), []byte("password-a2")); err != nil {
		t.Errorf("alice's bcrypt hash does not verify her new password: %v", err)
	}
	if cost, err := bcrypt.Cost([]byte(m["alice"])); err != nil || cost != bcrypt.MinCost {
		t.Errorf("cost %d, %v; want the store's %d", cost, err, bcrypt.MinCost)
	}

	// bcrypt reads at most 72 bytes: a longer password is stored, without
	// a bcrypt hash.
	long := strings.Repeat("p", 100)
	addTestIdentity(t, s, "long", acl.RoleClient, long)
	if m, err := s.BcryptHashes(ctx); err != nil || m["long"] != "" {
		t.Errorf("BcryptHashes with a 100-byte password: %v, %v; want none for it", m, err)
	}
	if _, err := s.Authenticate(ctx, "long", []byte(long)); err != nil {
		t.Errorf("login with the 100-byte password: %v", err)
	}

	none := openTestStore(t, StoreOptions{BcryptCost: -1})
	addTestIdentity(t, none, "bob", acl.RoleExpertAgent, "password-b")
	if m, err := none.BcryptHashes(ctx); err != nil || len(m) != 0 {
		t.Errorf("BcryptHashes with a negative cost = %v, %v; want none", m, err)
	}
	if _, err := Open(ctx, t.TempDir(), StoreOptions{BcryptCost: 99}); err == nil {
		t.Error("BcryptCost 99 opened a store")
	}
}

func TestRuleCRUD(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "c1", acl.RoleClient, "password-1")

	global, err := s.AddRule(ctx, acl.Rule{ID: 99, Access: acl.AccessRead, Filter: "public/#"})
	if err != nil {
		t.Fatal(err)
	}
	if global.ID == 0 || global.ID == 99 || global.Created.IsZero() {
		t.Fatalf("AddRule = %+v: want a store-assigned ID and creation time", global)
	}
	own, err := s.AddRule(ctx, acl.Rule{Username: "c1", Access: acl.AccessWrite, Filter: "sensors/+/temp"})
	if err != nil {
		t.Fatal(err)
	}
	// Same filter, other access: a distinct rule.
	if _, err := s.AddRule(ctx, acl.Rule{Username: "c1", Access: acl.AccessRead, Filter: "sensors/+/temp"}); err != nil {
		t.Fatal(err)
	}

	t.Run("add errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			r    acl.Rule
			want error
		}{
			{"duplicate", acl.Rule{Username: "c1", Access: acl.AccessWrite, Filter: "sensors/+/temp"}, ErrExists},
			{"duplicate global", acl.Rule{Access: acl.AccessRead, Filter: "public/#"}, ErrExists},
			{"unknown user", acl.Rule{Username: "nobody", Access: acl.AccessRead, Filter: "x/#"}, ErrNotFound},
			{"bad username", acl.Rule{Username: "a/b", Access: acl.AccessRead, Filter: "x/#"}, acl.ErrInvalidRule},
			{"no access", acl.Rule{Access: 0, Filter: "x/#"}, acl.ErrInvalidRule},
			{"unknown access", acl.Rule{Access: 4, Filter: "x/#"}, acl.ErrInvalidRule},
			{"everything", acl.Rule{Access: acl.AccessRead, Filter: "#"}, acl.ErrInvalidRule},
			{"reserved tree", acl.Rule{Access: acl.AccessRead, Filter: "ff/v2/mcp/+/+/status"}, acl.ErrInvalidRule},
			{"probe tree", acl.Rule{Access: acl.AccessReadWrite, Filter: "ff/v2/probe/c1/+"}, acl.ErrInvalidRule},
			{"reaches reserved", acl.Rule{Access: acl.AccessWrite, Filter: "+/v2/#"}, acl.ErrInvalidRule},
			{"v1 tree", acl.Rule{Access: acl.AccessRead, Filter: "ff/v1/mcp/agents/+/status"}, acl.ErrInvalidRule},
			{"reaches v1", acl.Rule{Access: acl.AccessWrite, Filter: "+/v1/#"}, acl.ErrInvalidRule},
			{"$SYS", acl.Rule{Access: acl.AccessRead, Filter: "$SYS/#"}, acl.ErrInvalidRule},
			{"$share", acl.Rule{Access: acl.AccessRead, Filter: "$share/g/public/#"}, acl.ErrInvalidRule},
			{"malformed filter", acl.Rule{Access: acl.AccessRead, Filter: "a/#/b"}, acl.ErrInvalidRule},
			{"empty filter", acl.Rule{Access: acl.AccessRead}, acl.ErrInvalidRule},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := s.AddRule(ctx, tc.r); !errors.Is(err, tc.want) {
					t.Fatalf("AddRule(%+v) = %v, want %v", tc.r, err, tc.want)
				}
			})
		}
	})

	rules, err := s.ListRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 3 || rules[0] != global || rules[1] != own {
		t.Fatalf("ListRules = %+v", rules)
	}

	if err := s.RemoveRule(ctx, global.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveRule(ctx, global.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RemoveRule twice = %v, want ErrNotFound", err)
	}
	// IDs are never reused.
	again, err := s.AddRule(ctx, acl.Rule{Access: acl.AccessRead, Filter: "public/#"})
	if err != nil {
		t.Fatal(err)
	}
	if again.ID <= global.ID {
		t.Fatalf("re-added rule got ID %d, want more than %d", again.ID, global.ID)
	}

	// Removing an identity removes its rules; global rules stay.
	if err := s.RemoveIdentity(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	rules, err = s.ListRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 1 || rules[0].ID != again.ID {
		t.Fatalf("after RemoveIdentity, ListRules = %+v; want only the global rule", rules)
	}
}

func TestListRulesFeedsPolicy(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "c1", acl.RoleClient, "password-1")
	if _, err := s.AddRule(ctx, acl.Rule{Username: "c1", Access: acl.AccessReadWrite, Filter: "devices/c1/#"}); err != nil {
		t.Fatal(err)
	}
	// A hand-edited row that AddRule would refuse.
	if _, err := s.db.ExecContext(ctx, qInsertRule, "", int64(acl.AccessReadWrite), "#", int64(0)); err != nil {
		t.Fatal(err)
	}
	rules, err := s.ListRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 {
		t.Fatalf("ListRules returned %d rules, want 2", len(rules))
	}
	p := acl.NewPolicy(rules)
	id, err := s.Identity(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allow(id, "c1", acl.Publish, "devices/c1/led") {
		t.Error("stored rule not in effect")
	}
	if p.Allow(id, "c1", acl.Subscribe, "#") || p.Allow(id, "c1", acl.Publish, "elsewhere") {
		t.Error("hand-edited # rule took effect")
	}
}
