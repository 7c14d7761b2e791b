package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
)

// migration is one step of the schema. Steps run in order of version, each
// in its own transaction together with its row in schema_migrations, so a
// crash leaves the schema at a known version. Never edit a released step:
// append a new one.
type migration struct {
	version int
	name    string
	stmts   []string
	// run, when set, runs after stmts in the same transaction: a step
	// that needs Go (decoding stored JSON), the same on every backend.
	run func(ctx context.Context, tx *sql.Tx) error
}

// migrations is the schema, oldest first. Versions are 1, 2, 3... without
// gaps. The DDL is SQLite's; on PostgreSQL "INTEGER PRIMARY KEY
// AUTOINCREMENT" becomes "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY".
var migrations = []migration{
	{
		version: 1,
		name:    "identities and rules",
		stmts: []string{
			`CREATE TABLE identities (
	username      TEXT PRIMARY KEY,
	role          TEXT NOT NULL,
	password_hash TEXT NOT NULL,
	disabled      INTEGER NOT NULL DEFAULT 0,
	created_ms    BIGINT NOT NULL
)`,
			// AUTOINCREMENT: a removed rule's ID is never handed out again, so
			// an operator's "remove rule 7" cannot hit a newer rule.
			`CREATE TABLE rules (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	username   TEXT NOT NULL DEFAULT '',
	access     INTEGER NOT NULL,
	filter     TEXT NOT NULL,
	created_ms BIGINT NOT NULL,
	UNIQUE (username, access, filter)
)`,
		},
	},
	{
		version: 2,
		name:    "personal access tokens",
		stmts: []string{
			// id is the token's visible prefix; secret_hash the hex SHA-256 of
			// the whole secret (the secret itself is never stored). Lookups go
			// by id, then the hash is compared in constant time.
			`CREATE TABLE tokens (
	id           TEXT PRIMARY KEY,
	user_id      TEXT NOT NULL,
	secret_hash  TEXT NOT NULL,
	scopes       TEXT NOT NULL,
	read_only    INTEGER NOT NULL DEFAULT 0,
	entities     TEXT NOT NULL DEFAULT '',
	name         TEXT NOT NULL DEFAULT '',
	created_ms   BIGINT NOT NULL,
	expires_ms   BIGINT NOT NULL DEFAULT 0,
	last_used_ms BIGINT NOT NULL DEFAULT 0,
	revoked_ms   BIGINT NOT NULL DEFAULT 0
)`,
			`CREATE INDEX tokens_user_id ON tokens (user_id)`,
		},
	},
	{
		version: 3,
		name:    "audit log",
		stmts: []string{
			// One row per batch of audited events (store/audit.go): the
			// events as a JSON array, their time range and count.
			`CREATE TABLE audit_segments (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	min_ms BIGINT NOT NULL,
	max_ms BIGINT NOT NULL,
	n      INTEGER NOT NULL,
	events TEXT NOT NULL
)`,
			`CREATE INDEX audit_segments_max ON audit_segments (max_ms, id)`,
			`CREATE INDEX audit_segments_min ON audit_segments (min_ms, id)`,
		},
	},
	{
		version: 4,
		name:    "ended MCP sessions",
		stmts: []string{
			// Sessions a client ended (DELETE) on any gateway replica: every
			// replica refuses them (store/sessions.go, gateway/session_shared.go).
			// until_ms is when the session ID could no longer be presented
			// anyway (its TTL); rows past it are purged.
			`CREATE TABLE ended_sessions (
	session_key TEXT PRIMARY KEY,
	ended_ms    BIGINT NOT NULL,
	until_ms    BIGINT NOT NULL
)`,
			`CREATE INDEX ended_sessions_until ON ended_sessions (until_ms)`,
		},
	},
	{
		version: 5,
		name:    "token agent limits",
		stmts: []string{
			// The expert agents a token is limited to, space-separated;
			// '' = every agent (what tokens made before had).
			`ALTER TABLE tokens ADD COLUMN agents TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		version: 6,
		name:    "user agent grants",
		stmts: []string{
			// The expert agents a user's tokens may use; no row = every agent.
			`CREATE TABLE user_agents (
	user_id TEXT NOT NULL,
	agent   TEXT NOT NULL,
	PRIMARY KEY (user_id, agent)
)`,
		},
	},
	{
		version: 7,
		name:    "bcrypt hashes for NATS",
		stmts: []string{
			// A bcrypt hash of the password, kept beside the "$7$" one for
			// brokers that verify only bcrypt (acl.NATSExport); '' = none
			// (passwords set before this version).
			`ALTER TABLE identities ADD COLUMN bcrypt_hash TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		version: 8,
		name:    "OAuth sign-in",
		stmts: []string{
			// People who sign in on the authorization page (store/users.go):
			// an argon2id hash of the password.
			`CREATE TABLE users (
	user_id       TEXT PRIMARY KEY,
	password_hash TEXT NOT NULL,
	created_ms    BIGINT NOT NULL
)`,
			// The resource (RFC 8707) a token was issued for and the OAuth
			// client that holds it; '' for personal tokens.
			`ALTER TABLE tokens ADD COLUMN audience TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE tokens ADD COLUMN client_id TEXT NOT NULL DEFAULT ''`,
			// Clients registered through RFC 7591 (store/oauth.go).
			// secret_hash is '' for public clients; redirect_uris are
			// space-separated (a URI holds no space).
			`CREATE TABLE oauth_clients (
	client_id     TEXT PRIMARY KEY,
	secret_hash   TEXT NOT NULL,
	name          TEXT NOT NULL,
	redirect_uris TEXT NOT NULL,
	created_ms    BIGINT NOT NULL
)`,
			// Authorization codes, kept by hash until they expire; spec is
			// the JSON of the token the code stands for. grant_id is the
			// grant its exchange made, revoked if the code comes again.
			`CREATE TABLE oauth_codes (
	code_hash    TEXT PRIMARY KEY,
	client_id    TEXT NOT NULL,
	redirect_uri TEXT NOT NULL,
	challenge    TEXT NOT NULL,
	spec         TEXT NOT NULL,
	expires_ms   BIGINT NOT NULL,
	used_ms      BIGINT NOT NULL DEFAULT 0,
	grant_id     TEXT NOT NULL DEFAULT ''
)`,
			`CREATE INDEX oauth_codes_expires ON oauth_codes (expires_ms)`,
			// A consent's lasting part: its refresh token (by hash, and the
			// one it replaced, to tell a replay) and its current access token.
			`CREATE TABLE oauth_grants (
	id                TEXT PRIMARY KEY,
	client_id         TEXT NOT NULL,
	user_id           TEXT NOT NULL,
	token_id          TEXT NOT NULL,
	refresh_hash      TEXT NOT NULL,
	prev_refresh_hash TEXT NOT NULL DEFAULT '',
	created_ms        BIGINT NOT NULL,
	expires_ms        BIGINT NOT NULL,
	revoked_ms        BIGINT NOT NULL DEFAULT 0
)`,
			`CREATE INDEX oauth_grants_user ON oauth_grants (user_id)`,
			`CREATE INDEX oauth_grants_token ON oauth_grants (token_id)`,
		},
	},
	{
		version: 9,
		name:    "OpenID sign-ins under way",
		stmts: []string{
			// A sign-in handed to an OpenID provider, between the redirect
			// there and the callback (store/oauth.go): kept by the hash of
			// the state parameter, taken once.
			`CREATE TABLE oauth_pending (
	state_hash TEXT PRIMARY KEY,
	data       TEXT NOT NULL,
	expires_ms BIGINT NOT NULL
)`,
			`CREATE INDEX oauth_pending_expires ON oauth_pending (expires_ms)`,
		},
	},
	{
		version: 10,
		name:    "OAuth grant purge indexes",
		stmts: []string{
			// GrantOAuth purges the grants that ended a month ago.
			`CREATE INDEX oauth_grants_expires ON oauth_grants (expires_ms)`,
			`CREATE INDEX oauth_grants_revoked ON oauth_grants (revoked_ms)`,
		},
	},
	{
		version: 11,
		name:    "OAuth client first use",
		stmts: []string{
			// When a user first consented to a client (0: never). Clients
			// never used are purged a while after they registered
			// (PurgeUnusedOAuthClients); the ones registered before this
			// column count as used, so an upgrade drops none.
			`ALTER TABLE oauth_clients ADD COLUMN used_ms BIGINT NOT NULL DEFAULT 0`,
			`UPDATE oauth_clients SET used_ms = created_ms`,
			`CREATE INDEX oauth_clients_unused ON oauth_clients (used_ms, created_ms)`,
		},
	},
	{
		version: 12,
		name:    "console admins",
		stmts: []string{
			// Sign-in users who may use the operator console (console/);
			// 0 for every user made before, so an upgrade grants nobody.
			`ALTER TABLE users ADD COLUMN admin INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		version: 13,
		name:    "audit filter index",
		stmts: []string{
			// The values the audit log is filtered by, one row per distinct
			// (field, value) of a segment (store/audit.go, auditKeyFields),
			// with the segment's time range and size and the positions of
			// the records that hold it: a filtered page reads, newest first
			// through audit_keys_value, only the segments where one record
			// holds every value asked, however many rows the log holds. A
			// segment's rows go with it (ON DELETE CASCADE; SQLite runs with
			// foreign_keys on) and are rewritten with it. IF NOT EXISTS, and
			// the backfill's ON CONFLICT: a schema rolled back to an older
			// version by hand (tests do) keeps the table.
			`CREATE TABLE IF NOT EXISTS audit_keys (
	seg    BIGINT NOT NULL REFERENCES audit_segments (id) ON DELETE CASCADE,
	field  TEXT NOT NULL,
	value  TEXT NOT NULL,
	min_ms BIGINT NOT NULL,
	max_ms BIGINT NOT NULL,
	n      INTEGER NOT NULL,
	pos    TEXT NOT NULL,
	PRIMARY KEY (seg, field, value)
)`,
			`CREATE INDEX IF NOT EXISTS audit_keys_value ON audit_keys (field, value, max_ms, seg)`,
			// max_span_ms bounds max_ms - min_ms of every segment (a record's
			// time is its call's start: a segment spans its flush interval
			// and its longest call). A query up to a time (until, a cursor)
			// reads the segments whose max_ms is below it plus this bound,
			// not every newer one. InsertAudit raises it; pruning leaves it.
			`CREATE TABLE IF NOT EXISTS audit_meta (
	name  TEXT PRIMARY KEY,
	value BIGINT NOT NULL
)`,
			`INSERT INTO audit_meta (name, value) SELECT 'max_span_ms', COALESCE(MAX(max_ms - min_ms), 0) FROM audit_segments WHERE true
ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
		},
		// The segments written before: their records decoded and keyed.
		run: backfillAuditKeys,
	},
	{
		version: 14,
		name:    "per-agent rate limits",
		stmts: []string{
			// An expert agent's rate limit across all callers
			// (store/agent_limits.go): the operator's text, as
			// gateway.ParseLimit reads it. No row: no limit of its own.
			// IF NOT EXISTS: a schema rolled back to an older version by
			// hand (tests do) keeps the table.
			`CREATE TABLE IF NOT EXISTS agent_limits (
	agent      TEXT PRIMARY KEY,
	rate_limit TEXT NOT NULL,
	updated_ms BIGINT NOT NULL
)`,
		},
	},
}

// migrate brings db to the newest schema version. It refuses a database
// written by a newer toolbus (a version it does not know).
func migrate(ctx context.Context, db *sql.DB, be *backend, log *logrus.Entry) error {
	if be.lockMigrations != nil {
		unlock, err := be.lockMigrations(ctx, db)
		if err != nil {
			return fmt.Errorf("lock schema migrations: %w", err)
		}
		defer unlock()
	}
	if _, err := db.ExecContext(ctx, qCreateMigrations); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, m := range migrations {
		if err := applyMigration(ctx, db, be, m, log); err != nil {
			return err
		}
	}
	var v int
	if err := db.QueryRowContext(ctx, qSchemaVersion).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if latest := migrations[len(migrations)-1].version; v > latest {
		return fmt.Errorf("database schema version %d is newer than this toolbus knows (%d): upgrade toolbus", v, latest)
	}
	return nil
}

// applyMigration runs m unless the database already has it. The version is
// read inside the write transaction, so two processes opening the same
// database at once (serve and a CLI command) apply each step once.
func applyMigration(ctx context.Context, db *sql.DB, be *backend, m migration, log *logrus.Entry) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %d: begin: %w", m.version, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var current int
	if err := tx.QueryRowContext(ctx, qSchemaVersion).Scan(&current); err != nil {
		return fmt.Errorf("migration %d: read schema version: %w", m.version, err)
	}
	if current >= m.version {
		return tx.Rollback()
	}
	if current != m.version-1 {
		return fmt.Errorf("migration %d: schema is at version %d, want %d", m.version, current, m.version-1)
	}
	for i, stmt := range m.stmts {
		if _, err := tx.ExecContext(ctx, be.ddl(stmt)); err != nil {
			return fmt.Errorf("migration %d (%s), statement %d: %w", m.version, m.name, i+1, err)
		}
	}
	if m.run != nil {
		if err := m.run(ctx, tx); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, qInsertMigration, m.version, m.name, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("migration %d: record: %w", m.version, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %d: commit: %w", m.version, err)
	}
	log.WithFields(logrus.Fields{"version": m.version, "name": m.name}).Info("applied schema migration")
	return nil
}
