package store

// Every SQL statement of the package lives here, so that another database can
// be swapped in by replacing this file and the DDL in migrate.go. The DML is
// written to run unchanged on SQLite (3.35+) and PostgreSQL: numbered
// placeholders ($1, $2...; modernc.org/sqlite binds them by ordinal), ON
// CONFLICT ... DO NOTHING instead of driver-specific constraint errors,
// RETURNING instead of LastInsertId, times as BIGINT unix milliseconds and
// booleans as 0/1 integers.
const (
	qInsertIdentity = `INSERT INTO identities (username, role, password_hash, disabled, created_ms, bcrypt_hash)
VALUES ($1, $2, $3, 0, $4, $5)
ON CONFLICT (username) DO NOTHING`
	qSelectIdentity = `SELECT username, role, disabled, created_ms FROM identities WHERE username = $1`
	qSelectLogin    = `SELECT username, role, disabled, created_ms, password_hash FROM identities WHERE username = $1`
	qListIdentities = `SELECT username, role, disabled, created_ms FROM identities ORDER BY username`
	qDeleteIdentity = `DELETE FROM identities WHERE username = $1`
	qUpdateDisabled = `UPDATE identities SET disabled = $2 WHERE username = $1`
	qUpdatePassword = `UPDATE identities SET password_hash = $2, bcrypt_hash = $3 WHERE username = $1`
	// Disabled identities are left out: whoever consumes the hashes (the
	// Mosquitto export) must not let them log in.
	qSelectPasswordHashes = `SELECT username, password_hash FROM identities WHERE disabled = 0 ORDER BY username`
	qSelectBcryptHashes   = `SELECT username, bcrypt_hash FROM identities WHERE disabled = 0 AND bcrypt_hash <> '' ORDER BY username`

	qIdentityExists = `SELECT 1 FROM identities WHERE username = $1`
	qInsertRule     = `INSERT INTO rules (username, access, filter, created_ms)
VALUES ($1, $2, $3, $4)
ON CONFLICT (username, access, filter) DO NOTHING
RETURNING id`
	qListRules         = `SELECT id, username, access, filter, created_ms FROM rules ORDER BY id`
	qDeleteRule        = `DELETE FROM rules WHERE id = $1`
	qDeleteRulesOfUser = `DELETE FROM rules WHERE username = $1`

	// Tokens: scopes, entities and agents are space-separated lists
	// ("type/id" entities); times are unix ms with 0 for "not set".
	qInsertToken = `INSERT INTO tokens (id, user_id, secret_hash, scopes, read_only, entities, name, created_ms, expires_ms, agents, audience, client_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (id) DO NOTHING`
	// Per-user agent grants (store/user_agents.go).
	qSelectUserAgents = `SELECT agent FROM user_agents WHERE user_id = $1 ORDER BY agent`
	qListUserAgents   = `SELECT user_id, agent FROM user_agents ORDER BY user_id, agent`
	qDeleteUserAgents = `DELETE FROM user_agents WHERE user_id = $1`
	qInsertUserAgent  = `INSERT INTO user_agents (user_id, agent) VALUES ($1, $2)`
	qTokenColumns     = `id, user_id, secret_hash, scopes, read_only, entities, name, created_ms, expires_ms, last_used_ms, revoked_ms, agents, audience, client_id`
	qSelectToken      = `SELECT ` + qTokenColumns + ` FROM tokens WHERE id = $1`
	qListTokens       = `SELECT ` + qTokenColumns + ` FROM tokens ORDER BY created_ms, id`
	qListTokensOfUser = `SELECT ` + qTokenColumns + ` FROM tokens WHERE user_id = $1 ORDER BY created_ms, id`
	// Sign-in users (store/users.go).
	qInsertUser         = `INSERT INTO users (user_id, password_hash, created_ms) VALUES ($1, $2, $3) ON CONFLICT (user_id) DO NOTHING`
	qListUsers          = `SELECT user_id, created_ms, admin FROM users ORDER BY user_id`
	qSetUserAdmin       = `UPDATE users SET admin = $2 WHERE user_id = $1`
	qSelectUserState    = `SELECT admin, password_hash FROM users WHERE user_id = $1`
	qSelectUserHash     = `SELECT password_hash FROM users WHERE user_id = $1`
	qSetUserPassword    = `UPDATE users SET password_hash = $2 WHERE user_id = $1`
	qDeleteUser         = `DELETE FROM users WHERE user_id = $1`
	qRevokeTokensOfUser = `UPDATE tokens SET revoked_ms = $2 WHERE user_id = $1 AND revoked_ms = 0`
	qRevokeGrantsOfUser = `UPDATE oauth_grants SET revoked_ms = $2 WHERE user_id = $1 AND revoked_ms = 0`
	// The OAuth authorization server (store/oauth.go).
	qInsertOAuthClient = `INSERT INTO oauth_clients (client_id, secret_hash, name, redirect_uris, created_ms) VALUES ($1, $2, $3, $4, $5)`
	qSelectOAuthClient = `SELECT secret_hash, name, redirect_uris, created_ms, used_ms FROM oauth_clients WHERE client_id = $1`
	// Matches the client's row whether or not it was used before: no row
	// means the client is gone.
	qUseOAuthClient    = `UPDATE oauth_clients SET used_ms = CASE WHEN used_ms = 0 THEN $2 ELSE used_ms END WHERE client_id = $1`
	qPurgeOAuthClients = `DELETE FROM oauth_clients WHERE used_ms = 0 AND created_ms < $1`
	qPurgeOAuthCodes   = `DELETE FROM oauth_codes WHERE expires_ms < $1`
	qInsertOAuthCode   = `INSERT INTO oauth_codes (code_hash, client_id, redirect_uri, challenge, spec, expires_ms) VALUES ($1, $2, $3, $4, $5, $6)`
	// Only one redemption can flip used_ms from 0.
	qRedeemOAuthCode = `UPDATE oauth_codes SET used_ms = $2, grant_id = $3 WHERE code_hash = $1 AND used_ms = 0 AND expires_ms > $2
RETURNING client_id, redirect_uri, challenge, spec, expires_ms`
	qSelectOAuthCodeUse = `SELECT used_ms, grant_id FROM oauth_codes WHERE code_hash = $1`
	qInsertOAuthGrant   = `INSERT INTO oauth_grants (id, client_id, user_id, token_id, refresh_hash, created_ms, expires_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO NOTHING`
	// A grant revoked before it was made: its code came twice.
	qInsertRevokedGrant = `INSERT INTO oauth_grants (id, client_id, user_id, token_id, refresh_hash, created_ms, expires_ms, revoked_ms)
VALUES ($1, '', '', '', '', $2, $2, $2)
ON CONFLICT (id) DO NOTHING`
	qSelectOAuthGrant = `SELECT client_id, token_id, refresh_hash, prev_refresh_hash, created_ms, expires_ms, revoked_ms FROM oauth_grants WHERE id = $1`
	// Only the request that holds the current refresh token, of a grant
	// still live, rotates it; the grant then points at the new token.
	qRotateOAuthGrant = `UPDATE oauth_grants SET refresh_hash = $2, prev_refresh_hash = $3, expires_ms = $4, token_id = $5
WHERE id = $1 AND refresh_hash = $3 AND revoked_ms = 0`
	qRevokeOAuthGrant = `UPDATE oauth_grants SET revoked_ms = CASE WHEN revoked_ms = 0 THEN $2 ELSE revoked_ms END
WHERE id = $1
RETURNING token_id`
	qSelectOAuthGrantOfToken = `SELECT id FROM oauth_grants WHERE token_id = $1`
	qPurgeOAuthGrants        = `DELETE FROM oauth_grants WHERE (revoked_ms <> 0 AND revoked_ms < $1) OR expires_ms < $1`
	qDeleteToken             = `DELETE FROM tokens WHERE id = $1`
	qPurgeOAuthPending       = `DELETE FROM oauth_pending WHERE expires_ms < $1`
	qInsertOAuthPending      = `INSERT INTO oauth_pending (state_hash, data, expires_ms) VALUES ($1, $2, $3)`
	// Taken once: the row goes with the read.
	qTakeOAuthPending = `DELETE FROM oauth_pending WHERE state_hash = $1 RETURNING data, expires_ms`
	// Revoking twice keeps the first time; RETURNING tells the caller which.
	qRevokeToken = `UPDATE tokens SET revoked_ms = CASE WHEN revoked_ms = 0 THEN $2 ELSE revoked_ms END
WHERE id = $1
RETURNING revoked_ms`
	// Never moves LastUsed back (another process may have written a newer one).
	qTouchToken = `UPDATE tokens SET last_used_ms = $2 WHERE id = $1 AND last_used_ms < $2`

	qCreateMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_ms BIGINT NOT NULL
)`
	qSchemaVersion   = `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`
	qInsertMigration = `INSERT INTO schema_migrations (version, name, applied_ms) VALUES ($1, $2, $3)`
)

// Statements of the operators' view of the clients (ListOAuthClients,
// DeleteOAuthClient). Portable as queries.go's: numbered placeholders,
// RETURNING, SUM of a CASE (no FILTER clause, which SQLite lacks).
const (
	// A grant is live while neither revoked nor expired; a token while
	// neither revoked nor expired (expires_ms 0: never). Last use is the
	// newest of the client's tokens' (the current ones: a refresh deletes
	// the token it replaces).
	qListOAuthClients = `SELECT c.client_id, c.secret_hash, c.name, c.redirect_uris, c.created_ms, c.used_ms,
COALESCE(g.n, 0), COALESCE(t.n, 0), COALESCE(t.last_ms, 0)
FROM oauth_clients c
LEFT JOIN (SELECT client_id, COUNT(*) AS n FROM oauth_grants WHERE revoked_ms = 0 AND expires_ms > $1 GROUP BY client_id) g
  ON g.client_id = c.client_id
LEFT JOIN (SELECT client_id, SUM(CASE WHEN revoked_ms = 0 AND (expires_ms = 0 OR expires_ms > $1) THEN 1 ELSE 0 END) AS n,
  MAX(last_used_ms) AS last_ms FROM tokens WHERE client_id <> '' GROUP BY client_id) t
  ON t.client_id = c.client_id
ORDER BY c.created_ms, c.client_id`
	qDeleteOAuthClient       = `DELETE FROM oauth_clients WHERE client_id = $1`
	qDeleteOAuthGrantsOf     = `DELETE FROM oauth_grants WHERE client_id = $1`
	qDeleteOAuthCodesOf      = `DELETE FROM oauth_codes WHERE client_id = $1`
	qDeleteOAuthClientTokens = `DELETE FROM tokens WHERE client_id = $1 RETURNING id`
	qDeleteOAuthGrant        = `DELETE FROM oauth_grants WHERE id = $1`
)

// Agent rate limits (agent_limits.go). The upsert runs unchanged on SQLite (3.24+)
// and PostgreSQL.
const (
	qUpsertAgentLimit = `INSERT INTO agent_limits (agent, rate_limit, updated_ms) VALUES ($1, $2, $3)
ON CONFLICT (agent) DO UPDATE SET rate_limit = excluded.rate_limit, updated_ms = excluded.updated_ms`
	qDeleteAgentLimit = `DELETE FROM agent_limits WHERE agent = $1`
	qListAgentLimits  = `SELECT agent, rate_limit FROM agent_limits ORDER BY agent`
)
