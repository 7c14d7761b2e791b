package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/logutil"
)

// DBFileName is the store's file inside the data directory.
const DBFileName = "toolbus.db"

// StoreOptions configures Open. The zero value is ready to use.
type StoreOptions struct {
	// HashIterations for new password hashes; 0 means acl.DefaultHashIterations (210000).
	HashIterations int
	// AuthCacheSize bounds the cache of recent successful logins that spares
	// reconnecting clients the KDF. 0 means 1024 entries; negative disables it.
	AuthCacheSize int
	// BusyTimeout is how long a statement waits for another connection's
	// write lock before failing. 0 means 5s.
	BusyTimeout time.Duration
	// BcryptCost is the cost of the bcrypt hash kept beside each new MQTT
	// password, for brokers that verify only bcrypt (NATS: see acl.NATSExport).
	// 0 means DefaultBcryptCost (11); negative keeps none (such identities
	// cannot be exported for NATS).
	BcryptCost int
	// TokenCacheTTL is how long AuthenticateToken trusts a token it has read
	// from the database, and so how late a revocation by another process
	// (the CLI on the same data directory) takes effect. 0 means
	// DefaultTokenCacheTTL (2s); negative disables the cache (every request
	// reads the database).
	TokenCacheTTL time.Duration
	// Logger receives the store's logs; nil discards them.
	Logger *logrus.Entry
}

// Store is the gateway's database (see the package doc), in SQLite (Open)
// or PostgreSQL (OpenURL). It is safe for concurrent use.
type Store struct {
	db    *sql.DB
	log   *logrus.Entry
	iters int
	bcost int // StoreOptions.BcryptCost; negative = none

	// kdf bounds how many password hashes run at once, so a burst of logins
	// (or of guesses) cannot take every core; waiting honours the context.
	kdf     chan struct{}
	kdfRuns atomic.Int64 // password verifications run; tests read it to see cache hits
	// dummyHash is verified against for unknown usernames so that they cost
	// the same KDF work as a wrong password.
	dummyHash string
	// dummyUserHash does the same for unknown sign-in users (argon2id).
	dummyUserHash string

	authMu    sync.Mutex
	authCache *simplelru.LRU[string, authEntry] // nil when disabled
	authKey   []byte                            // per-process HMAC key of cached passwords

	tokens tokenAuth // personal access tokens: row cache and LastUsed writer

	ended       endedWriter  // EndSession's group commit (sessions.go)
	endedPurged atomic.Int64 // unix ms of EndSession's last purge (sessions.go)
}

// Open opens (creating if needed) the store in dataDir/toolbus.db and brings
// its schema up to date. The directory is created with mode 0700 and the
// database file with 0600: it holds password hashes. OpenURL opens a shared
// PostgreSQL store instead.
func Open(ctx context.Context, dataDir string, opts StoreOptions) (*Store, error) {
	log, err := opts.fill()
	if err != nil {
		return nil, err
	}
	if dataDir == "" {
		return nil, errors.New("store: empty data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("store: data directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data directory: %w", classifyWriteErr(err))
	}
	path := filepath.Join(dir, DBFileName)
	// SQLite would create the file with the umask's mode; the -wal and -shm
	// files copy the database file's mode, so creating it first covers them.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open database file for writing: %w", classifyWriteErr(err))
	}
	_ = f.Close()

	db, err := sql.Open("sqlite", dsn(path, opts.BusyTimeout))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// database/sql keeps 2 idle connections by default and closes the rest
	// as they come back: under concurrent requests (a session ended, a new
	// session checked per MCP request) it opened a SQLite connection per
	// query, and each open runs the pragmas and reads the schema, over and
	// over in a run of short sessions. Opening stays
	// unbounded as before (a query never waits for a connection); the
	// connections a busy minute needed are kept.
	db.SetMaxIdleConns(sqliteMaxIdleConns)
	db.SetConnMaxIdleTime(sqliteConnMaxIdleTime)
	return newStore(ctx, db, sqliteBackend, path, opts, log)
}

// The SQLite connection pool (see Open).
const (
	sqliteMaxIdleConns    = 16
	sqliteConnMaxIdleTime = time.Minute
)

// fill applies the documented defaults to opts and returns the store's logger.
func (opts *StoreOptions) fill() (*logrus.Entry, error) {
	if opts.HashIterations == 0 {
		opts.HashIterations = acl.DefaultHashIterations
	}
	if opts.HashIterations < 1 || opts.HashIterations > acl.MaxHashIterations {
		return nil, fmt.Errorf("store: HashIterations %d: want 1..%d", opts.HashIterations, acl.MaxHashIterations)
	}
	if opts.BcryptCost == 0 {
		opts.BcryptCost = DefaultBcryptCost
	}
	if opts.BcryptCost > bcrypt.MaxCost || opts.BcryptCost > 0 && opts.BcryptCost < bcrypt.MinCost {
		return nil, fmt.Errorf("store: BcryptCost %d: want %d..%d, or negative for none", opts.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if opts.AuthCacheSize == 0 {
		opts.AuthCacheSize = 1024
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	return logutil.Component(opts.Logger, "store"), nil
}

// pingUntilFree opens db's first connection, trying again while SQLite says
// the database is busy, for up to wait. Two processes opening a fresh data
// directory at once (the CLI and the server) race to switch it to WAL, and
// SQLite answers that switch with SQLITE_BUSY at once rather than through
// its busy timeout.
func pingUntilFree(ctx context.Context, db *sql.DB, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := db.PingContext(ctx)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqliteBusy || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// newStore checks db, migrates it and starts the store's goroutine. where
// names the database in errors (never with a password). It closes db when
// it fails.
func newStore(ctx context.Context, db *sql.DB, be *backend, where string, opts StoreOptions, log *logrus.Entry) (*Store, error) {
	if err := pingUntilFree(ctx, db, opts.BusyTimeout); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: %w", where, err)
	}
	if err := migrate(ctx, db, be, log); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: %s: %w", where, classifyWriteErr(err))
	}

	s := &Store{
		db:    db,
		log:   log,
		iters: opts.HashIterations,
		bcost: opts.BcryptCost,
		kdf:   make(chan struct{}, runtime.GOMAXPROCS(0)),
		ended: endedWriter{slot: make(chan struct{}, 1)},
	}
	var err error
	if s.dummyHash, err = acl.UnmatchableHash(opts.HashIterations); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if s.dummyUserHash, err = newDummyArgon2id(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if opts.AuthCacheSize > 0 {
		s.authCache, _ = simplelru.NewLRU[string, authEntry](opts.AuthCacheSize, nil) // size > 0 cannot fail
		s.authKey = make([]byte, 32)
		if _, err := rand.Read(s.authKey); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("store: auth cache key: %w", err)
		}
	}
	s.startTokens(opts.TokenCacheTTL)
	return s, nil
}

// dsn builds a modernc.org/sqlite data source name. The "file:" URI form lets
// any path through (SQLite decodes the escapes); the query sets the pragmas
// on every pooled connection. Immediate transactions take the write lock at
// BEGIN, so read-then-write transactions cannot deadlock on lock upgrades.
func dsn(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Close writes the last token uses, stops the store's goroutine and closes
// the database.
func (s *Store) Close() error {
	s.stopTokens()
	return s.db.Close()
}

// acquireKDF takes a slot of the KDF limiter, or fails when ctx ends first.
func (s *Store) acquireKDF(ctx context.Context) error {
	select {
	case s.kdf <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) releaseKDF() { <-s.kdf }

// KDFRuns is how many password verifications (each a run of the KDF) the
// store has started: logins the cache of recent ones did not know.
func (s *Store) KDFRuns() int64 { return s.kdfRuns.Load() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// now is the creation time of new rows, at the precision they are stored with.
func now() (time.Time, int64) {
	ms := time.Now().UnixMilli()
	return fromMillis(ms), ms
}
