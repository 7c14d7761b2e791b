package acl

// Every SQL statement of the package lives here, so that another database can
// be swapped in by replacing this file and the DDL in migrate.go. The DML is
// written to run unchanged on SQLite (3.35+) and PostgreSQL: numbered
// placeholders ($1, $2...; modernc.org/sqlite binds them by ordinal), ON
// CONFLICT ... DO NOTHING instead of driver-specific constraint errors,
// RETURNING instead of LastInsertId, times as BIGINT unix milliseconds and
// booleans as 0/1 integers.
const (
	qInsertIdentity = `INSERT INTO identities (username, role, password_hash, disabled, created_ms)
VALUES ($1, $2, $3, 0, $4)
ON CONFLICT (username) DO NOTHING`
	qSelectIdentity = `SELECT username, role, disabled, created_ms FROM identities WHERE username = $1`
	qSelectLogin    = `SELECT username, role, disabled, created_ms, password_hash FROM identities WHERE username = $1`
	qListIdentities = `SELECT username, role, disabled, created_ms FROM identities ORDER BY username`
	qDeleteIdentity = `DELETE FROM identities WHERE username = $1`
	qUpdateDisabled = `UPDATE identities SET disabled = $2 WHERE username = $1`
	qUpdatePassword = `UPDATE identities SET password_hash = $2 WHERE username = $1`
	// Disabled identities are left out: whoever consumes the hashes (the
	// Mosquitto export) must not let them log in.
	qSelectPasswordHashes = `SELECT username, password_hash FROM identities WHERE disabled = 0 ORDER BY username`

	qIdentityExists = `SELECT 1 FROM identities WHERE username = $1`
	qInsertRule     = `INSERT INTO rules (username, access, filter, created_ms)
VALUES ($1, $2, $3, $4)
ON CONFLICT (username, access, filter) DO NOTHING
RETURNING id`
	qListRules         = `SELECT id, username, access, filter, created_ms FROM rules ORDER BY id`
	qDeleteRule        = `DELETE FROM rules WHERE id = $1`
	qDeleteRulesOfUser = `DELETE FROM rules WHERE username = $1`

	qCreateMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_ms BIGINT NOT NULL
)`
	qSchemaVersion   = `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`
	qInsertMigration = `INSERT INTO schema_migrations (version, name, applied_ms) VALUES ($1, $2, $3)`
)
