package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/internal/testenv/pgtest"
)

// testPG is the PostgreSQL server openAny opens stores on; nil means SQLite
// in the given directory. TestStoreBackends sets it for its postgres
// subtests (the package's tests do not run in parallel).
var (
	testPG    *pgtest.Postgres
	testPGDBs map[string]string // data directory -> database URL: a reopen finds its rows
)

// pgFixtures make the test database answer the SQLite functions a few
// tests query with.
var pgFixtures = []string{
	`CREATE FUNCTION instr(text, text) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT strpos($1, $2)'`,
}

// openAny opens the store of dir on the backend under test.
func openAny(ctx context.Context, t *testing.T, dir string, opts StoreOptions) (*Store, error) {
	t.Helper()
	if testPG == nil {
		return Open(ctx, dir, opts)
	}
	u, ok := testPGDBs[dir]
	if !ok {
		u = testPG.CreateDatabase(t, pgFixtures...)
		testPGDBs[dir] = u
	}
	return OpenURL(ctx, u, opts)
}

// portableTests are the store's tests that hold on every backend (the
// others check SQLite's files, pragmas and error codes).
var portableTests = []struct {
	name string
	f    func(*testing.T)
}{
	{"OpenMigratesOnce", TestOpenMigratesOnce},
	{"OAuthClientList", TestOAuthClientList},
	{"OAuthClientDelete", TestOAuthClientDelete},
	{"OAuthClientDeleteRacesGrant", TestOAuthClientDeleteRacesGrant},
	{"OpenRefusesNewerSchema", TestOpenRefusesNewerSchema},
	{"IdentityCRUD", TestIdentityCRUD},
	{"PasswordHashes", TestPasswordHashes},
	{"RuleCRUD", TestRuleCRUD},
	{"ListRulesFeedsPolicy", TestListRulesFeedsPolicy},
	{"Authenticate", TestAuthenticate},
	{"AuthenticateCache", TestAuthenticateCache},
	{"AuthenticateCacheDisabled", TestAuthenticateCacheDisabled},
	{"AuthenticateContext", TestAuthenticateContext},
	{"AuthenticateCorruptHash", TestAuthenticateCorruptHash},
	{"AuthenticateConcurrent", TestAuthenticateConcurrent},
	{"CreateToken", TestCreateToken},
	{"CreateTokenInvalid", TestCreateTokenInvalid},
	{"ListTokens", TestListTokens},
	{"TokenAgents", TestTokenAgents},
	{"UserAgents", TestUserAgents},
	{"AgentLimits", TestAgentLimits},
	{"RevokeToken", TestRevokeToken},
	{"AuthenticateToken", TestAuthenticateToken},
	{"AuthenticateTokenCache", TestAuthenticateTokenCache},
	{"AuthenticateTokenCacheDisabled", TestAuthenticateTokenCacheDisabled},
	{"RevokeTokenInProcessIsImmediate", TestRevokeTokenInProcessIsImmediate},
	{"RevokeTokenByAnotherStore", TestRevokeTokenByAnotherStore},
	{"AuthenticateTokenExpiresWhileCached", TestAuthenticateTokenExpiresWhileCached},
	{"AuthenticateTokenDatabaseError", TestAuthenticateTokenDatabaseError},
	{"AuthenticateTokenCorruptRow", TestAuthenticateTokenCorruptRow},
	{"TokenLastUsed", TestTokenLastUsed},
	{"TokenLastUsedOnceAcrossReloads", TestTokenLastUsedOnceAcrossReloads},
	{"TokenLastUsedWrittenOnClose", TestTokenLastUsedWrittenOnClose},
	{"RevokeTokenRacesAuthenticate", TestRevokeTokenRacesAuthenticate},
	{"AuthenticateTokenConcurrent", TestAuthenticateTokenConcurrent},
	{"EndedSessions", TestEndedSessions},
	{"EndedSessionsConcurrent", TestEndedSessionsConcurrent},
	{"InsertAuditChunks", TestInsertAuditChunks},
	{"QueryAudit", TestQueryAudit},
	{"PruneAudit", TestPruneAudit},
	{"MigrateConcurrently", testMigrateConcurrently},
	{"Users", TestUsers},
	{"UserAdmin", TestUserAdmin},
	{"UserAdminMigration", TestUserAdminMigration},
	{"OAuthClients", TestOAuthClients},
	{"OAuthCodeSingleUse", TestOAuthCodeSingleUse},
	{"OAuthRefreshRotation", TestOAuthRefreshRotation},
	{"OAuthRefreshLimits", TestOAuthRefreshLimits},
	{"OAuthRevocation", TestOAuthRevocation},
	{"PendingLogin", TestPendingLogin},
}

// TestStoreBackends runs the portable store tests on each backend: SQLite
// in a temporary directory, and a PostgreSQL server of its own (a fresh
// database per data directory).
func TestStoreBackends(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "postgres" {
				testPG, testPGDBs = pgtest.Start(t), map[string]string{}
				t.Cleanup(func() { testPG, testPGDBs = nil, nil })
			}
			for _, tc := range portableTests {
				t.Run(tc.name, tc.f)
			}
		})
	}
}

func TestEndedSessions(t *testing.T) {
	dir := t.TempDir()
	a := openTestStoreIn(t, dir, StoreOptions{})
	b := openTestStoreIn(t, dir, StoreOptions{}) // another replica on the same store
	ctx := testContext(t)
	if ended, err := b.SessionEnded(ctx, "k1"); err != nil || ended {
		t.Fatalf("SessionEnded before any end = %v, %v; want false", ended, err)
	}
	until := time.Now().Add(time.Hour)
	for range 2 { // ending twice is not an error
		if err := a.EndSession(ctx, "k1", until); err != nil {
			t.Fatalf("EndSession: %v", err)
		}
	}
	if ended, err := b.SessionEnded(ctx, "k1"); err != nil || !ended {
		t.Fatalf("SessionEnded on the other store = %v, %v; want true", ended, err)
	}
	if ended, _ := b.SessionEnded(ctx, "k2"); ended {
		t.Fatal("another key counts as ended")
	}
	// Rows past their time do not count (and are purged by an end at most
	// once a minute).
	if err := a.EndSession(ctx, "old", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if ended, _ := b.SessionEnded(ctx, "old"); ended {
		t.Error("an ended session past its time still counts")
	}
	if err := a.EndSession(ctx, "", until); err == nil {
		t.Error("EndSession with an empty key succeeded")
	}
}

// testMigrateConcurrently opens one fresh database from several processes'
// worth of stores at once, as replicas starting together do: each step is
// applied once and every Open succeeds.
func testMigrateConcurrently(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	if testPG != nil {
		// Create the database before the race: openAny's map is not
		// safe for concurrent use.
		testPGDBs[dir] = testPG.CreateDatabase(t)
	}
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if testPG != nil {
				stores[i], errs[i] = OpenURL(ctx, testPGDBs[dir], StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
			} else {
				stores[i], errs[i] = Open(ctx, dir, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	if t.Failed() {
		return
	}
	var count, version int
	if err := stores[0].db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&count, &version); err != nil {
		t.Fatal(err)
	}
	if want := len(migrations); count != want || version != migrations[want-1].version {
		t.Fatalf("schema_migrations has %d rows up to %d; want %d up to %d", count, version, want, migrations[want-1].version)
	}
}

func TestOpenURLRefuses(t *testing.T) {
	ctx := testContext(t)
	for _, u := range []string{"mysql://u:secret@h/db", "::not a url", "sqlite:///tmp/x.db"} {
		s, err := OpenURL(ctx, u, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
		if err == nil {
			_ = s.Close()
			t.Errorf("OpenURL(%q) succeeded", u)
			continue
		}
		if !errors.Is(err, ErrStoreURL) {
			t.Errorf("OpenURL(%q) = %v; want ErrStoreURL", u, err)
		}
	}
	if got := RedactURL("postgres://u:secret@h/db"); got != "postgres://u:xxxxx@h/db" {
		t.Errorf("RedactURL = %q", got)
	}
}

func TestClassifyPgErr(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
	}{
		{"25006", ErrStoreReadOnly},
		{"53100", ErrStoreFull},
		{"53200", ErrStoreFull},
		{"53300", nil}, // too many connections: try again, not full
		{"23505", nil},
	} {
		err := classifyWriteErr(&pgconn.PgError{Code: tc.code, Message: "m"})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			t.Errorf("%s: the cause is lost: %v", tc.code, err)
		}
		for _, s := range []error{ErrStoreReadOnly, ErrStoreFull} {
			if got := errors.Is(err, s); got != (s == tc.want) {
				t.Errorf("%s: errors.Is(%v, %v) = %v", tc.code, err, s, got)
			}
		}
	}
}

// Concurrent ends share transactions (endedWriter) and every one of them
// is recorded, on the store it was written to and on another replica.
func TestEndedSessionsConcurrent(t *testing.T) {
	dir := t.TempDir()
	a := openTestStoreIn(t, dir, StoreOptions{})
	b := openTestStoreIn(t, dir, StoreOptions{})
	ctx := testContext(t)
	until := time.Now().Add(time.Hour)
	const n = 64
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- a.EndSession(ctx, fmt.Sprintf("c%02d", i), until) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("EndSession: %v", err)
		}
	}
	for i := range n {
		if ended, err := b.SessionEnded(ctx, fmt.Sprintf("c%02d", i)); err != nil || !ended {
			t.Fatalf("c%02d: SessionEnded = %v, %v; want true", i, ended, err)
		}
	}
	// A caller that gives up while another batch is written leaves its row
	// for the next batch.
	a.ended.slot <- struct{}{} // a write in progress
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.EndSession(gone, "late", until); !errors.Is(err, context.Canceled) {
		t.Fatalf("EndSession with a cancelled context while the slot is held: %v", err)
	}
	<-a.ended.slot
	if err := a.EndSession(ctx, "next", until); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"late", "next"} {
		if ended, err := b.SessionEnded(ctx, k); err != nil || !ended {
			t.Fatalf("%s: SessionEnded = %v, %v; want true", k, ended, err)
		}
	}
}
