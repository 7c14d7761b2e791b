package acl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The audit log's rows live in the table audit_events (migration 3). Its
// statements are kept here rather than in queries.go so that the audit log
// stays one file beside the store; they follow the same rules: $n
// placeholders, times as unix milliseconds, nothing driver-specific.

// Kinds of audit events (AuditEvent.Kind).
const (
	AuditToolCall        = "tool_call"        // a tools/call that reached tool lookup
	AuditRefused         = "refused"          // an HTTP request refused before it ran (401, 403, 413, 429)
	AuditAdmin           = "admin"            // a change asked of the admin model, made or refused
	AuditAgentConnect    = "agent_connect"    // an expert agent came online
	AuditAgentDisconnect = "agent_disconnect" // an expert agent went away
	AuditMQTTDenied      = "mqtt_denied"      // a publish or subscribe the broker's ACL refused
)

// ErrInvalidAuditQuery is returned by QueryAudit for a query it cannot run:
// a malformed cursor, a limit out of range, until before since.
var ErrInvalidAuditQuery = errors.New("invalid audit query")

// AuditEvent is one row of the audit log. It never holds a secret: TokenID
// is a token's public ID, and no tool argument is kept.
type AuditEvent struct {
	ID   int64 // assigned by the store; ignored by InsertAudit
	Time time.Time
	Kind string
	// The actor: a token (its ID) and its user, or an MQTT identity
	// (UserID holds its username) and its client ID.
	TokenID, UserID, ClientID string
	SessionID                 string
	EntityType, EntityID      string
	Tool, Source              string
	// Action and Target say what an admin change or an MQTT refusal was
	// about ("identity.disable" "identity agent-7"; "publish" "a/b"), or
	// the method and path of a refused HTTP request.
	Action, Target string
	Status         int // HTTP status of a refusal
	Duration       time.Duration
	Outcome        string // ok, tool_error, timeout, refused, error, cancelled
	Reason         string
	RequestID      string
}

// AuditQuery selects audit events. Zero fields select everything.
type AuditQuery struct {
	// Since (inclusive) and Until (exclusive) bound the events' times.
	Since, Until              time.Time
	User, Tool, Outcome, Kind string
	// Limit is the page size: 0 means DefaultAuditLimit, at most
	// MaxAuditLimit.
	Limit int
	// Cursor continues a previous page (AuditPage.Next).
	Cursor string
}

// Page sizes of QueryAudit.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

const auditColumns = `id, time_ms, kind, token_id, user_id, client_id, session_id, entity_type, entity_id,
tool, source, action, target, status, duration_us, outcome, reason, request_id`

const (
	qInsertAudit = `INSERT INTO audit_events (time_ms, kind, token_id, user_id, client_id, session_id, entity_type, entity_id,
tool, source, action, target, status, duration_us, outcome, reason, request_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`
	// Oldest first by the same order the queries read, a chunk at a time so
	// that a large backlog never holds the write lock for long.
	qDeleteAuditBefore = `DELETE FROM audit_events WHERE id IN
(SELECT id FROM audit_events WHERE time_ms < $1 ORDER BY time_ms, id LIMIT $2)`
	qDeleteAuditOldest = `DELETE FROM audit_events WHERE id IN
(SELECT id FROM audit_events ORDER BY time_ms, id LIMIT $1)`
	qCountAudit = `SELECT COUNT(*) FROM audit_events`
)

// InsertAudit writes events in one transaction: all of them or none.
func (s *Store) InsertAudit(ctx context.Context, events []AuditEvent) (err error) {
	defer mapWriteErr(&err)
	if len(events) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("acl: audit insert: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, qInsertAudit)
	if err != nil {
		return fmt.Errorf("acl: audit insert: prepare: %w", err)
	}
	defer stmt.Close()
	for i := range events {
		e := &events[i]
		if _, err := stmt.ExecContext(ctx, e.Time.UnixMilli(), e.Kind, e.TokenID, e.UserID, e.ClientID, e.SessionID,
			e.EntityType, e.EntityID, e.Tool, e.Source, e.Action, e.Target, e.Status, e.Duration.Microseconds(),
			e.Outcome, e.Reason, e.RequestID); err != nil {
			return fmt.Errorf("acl: audit insert: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("acl: audit insert: commit: %w", err)
	}
	return nil
}

// QueryAudit returns the events q selects, newest first (by time, then by
// insertion), and the cursor of the next page ("" when this is the last).
func (s *Store) QueryAudit(ctx context.Context, q AuditQuery) ([]AuditEvent, string, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultAuditLimit
	case limit < 0 || limit > MaxAuditLimit:
		return nil, "", fmt.Errorf("%w: limit %d: want 1..%d", ErrInvalidAuditQuery, limit, MaxAuditLimit)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return nil, "", fmt.Errorf("%w: until is before since", ErrInvalidAuditQuery)
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if !q.Since.IsZero() {
		where = append(where, "time_ms >= "+arg(q.Since.UnixMilli()))
	}
	if !q.Until.IsZero() {
		where = append(where, "time_ms < "+arg(q.Until.UnixMilli()))
	}
	for _, f := range []struct{ col, v string }{{"user_id", q.User}, {"tool", q.Tool}, {"outcome", q.Outcome}, {"kind", q.Kind}} {
		if f.v != "" {
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	if q.Cursor != "" {
		ms, id, ok := parseAuditCursor(q.Cursor)
		if !ok {
			return nil, "", fmt.Errorf("%w: cursor %q: pass the next value of a previous answer", ErrInvalidAuditQuery, q.Cursor)
		}
		where = append(where, "(time_ms < "+arg(ms)+" OR (time_ms = "+arg(ms)+" AND id < "+arg(id)+"))")
	}
	query := "SELECT " + auditColumns + " FROM audit_events"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY time_ms DESC, id DESC LIMIT " + arg(limit+1) // one more: is there a next page?
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("acl: audit query: %w", err)
	}
	defer rows.Close()
	out := make([]AuditEvent, 0, min(limit+1, 64))
	for rows.Next() {
		var (
			e       AuditEvent
			ms, dur int64
		)
		if err := rows.Scan(&e.ID, &ms, &e.Kind, &e.TokenID, &e.UserID, &e.ClientID, &e.SessionID, &e.EntityType, &e.EntityID,
			&e.Tool, &e.Source, &e.Action, &e.Target, &e.Status, &dur, &e.Outcome, &e.Reason, &e.RequestID); err != nil {
			return nil, "", fmt.Errorf("acl: audit query: %w", err)
		}
		e.Time, e.Duration = fromMillis(ms), time.Duration(dur)*time.Microsecond
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("acl: audit query: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = strconv.FormatInt(last.Time.UnixMilli(), 10) + "-" + strconv.FormatInt(last.ID, 10)
	}
	return out, next, nil
}

func parseAuditCursor(c string) (ms, id int64, ok bool) {
	a, b, found := strings.Cut(c, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseInt(a, 10, 64)
	id, err2 := strconv.ParseInt(b, 10, 64)
	return ms, id, err1 == nil && err2 == nil && ms >= 0 && id > 0
}

// PruneAudit deletes the events older than before (none when before is
// zero), then the oldest events beyond maxRows (none when maxRows <= 0),
// chunk rows per transaction (0 means 5000). It returns how many it deleted.
// Only the oldest go: by time, then by insertion.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, maxRows int64, chunk int) (deleted int64, err error) {
	defer mapWriteErr(&err)
	if chunk <= 0 {
		chunk = 5000
	}
	if !before.IsZero() {
		for {
			res, err := s.db.ExecContext(ctx, qDeleteAuditBefore, before.UnixMilli(), chunk)
			if err != nil {
				return deleted, fmt.Errorf("acl: audit prune by age: %w", err)
			}
			n, _ := res.RowsAffected()
			deleted += n
			if n < int64(chunk) {
				break
			}
		}
	}
	if maxRows > 0 {
		var count int64
		if err := s.db.QueryRowContext(ctx, qCountAudit).Scan(&count); err != nil {
			return deleted, fmt.Errorf("acl: audit prune by size: count: %w", err)
		}
		for excess := count - maxRows; excess > 0; {
			n := min(excess, int64(chunk))
			res, err := s.db.ExecContext(ctx, qDeleteAuditOldest, n)
			if err != nil {
				return deleted, fmt.Errorf("acl: audit prune by size: %w", err)
			}
			got, _ := res.RowsAffected()
			deleted += got
			excess -= got
			if got == 0 {
				break
			}
		}
	}
	return deleted, nil
}

// CountAudit returns how many events the audit log holds.
func (s *Store) CountAudit(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, qCountAudit).Scan(&n); err != nil {
		return 0, fmt.Errorf("acl: audit count: %w", err)
	}
	return n, nil
}

// TokenIDOf returns the public ID a bearer secret claims, without checking
// it, so that a refused request can be attributed to the token it named; ""
// when the secret cannot be a toolbus token.
func TokenIDOf(secret string) string {
	id, _ := parseSecret(secret)
	return id
}
