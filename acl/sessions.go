package acl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Statements of the ended-sessions table (migration 4). They are kept out
// of queries.go, which other work edits, but follow its rules ($n, ON
// CONFLICT, unix ms).
const (
	qInsertEndedSession = `INSERT INTO ended_sessions (session_key, ended_ms, until_ms) VALUES ($1, $2, $3)
ON CONFLICT (session_key) DO NOTHING`
	qSelectEndedSession = `SELECT 1 FROM ended_sessions WHERE session_key = $1 AND until_ms >= $2`
	qPurgeEndedSessions = `DELETE FROM ended_sessions WHERE until_ms < $1`
)

// endedPurgeEvery is how often EndSession deletes the rows past their
// time: a purge per end was a second write transaction per DELETE.
const endedPurgeEvery = time.Minute

// EndSession records that the MCP session with this key was ended by its
// client, so that every gateway sharing the store refuses it. until is when
// the row stops mattering (the session could not be presented after it
// anyway); rows past it no longer count, and are deleted by an end at most
// once per endedPurgeEvery.
func (s *Store) EndSession(ctx context.Context, key string, until time.Time) (err error) {
	defer mapWriteErr(&err)
	if key == "" {
		return errors.New("acl: empty session key")
	}
	_, ms := now()
	if _, err := s.db.ExecContext(ctx, qInsertEndedSession, key, ms, until.UnixMilli()); err != nil {
		return fmt.Errorf("acl: end session: %w", err)
	}
	if last := s.endedPurged.Load(); ms-last >= endedPurgeEvery.Milliseconds() && s.endedPurged.CompareAndSwap(last, ms) {
		if _, err := s.db.ExecContext(ctx, qPurgeEndedSessions, ms); err != nil {
			// The session is recorded; a failed purge only leaves rows for
			// the next one.
			s.log.WithError(err).Warn("could not purge ended sessions")
		}
	}
	return nil
}

// SessionEnded reports whether EndSession recorded the key, with a time
// not past yet.
func (s *Store) SessionEnded(ctx context.Context, key string) (bool, error) {
	var one int
	_, ms := now()
	err := s.db.QueryRowContext(ctx, qSelectEndedSession, key, ms).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	}
	return false, fmt.Errorf("acl: session ended?: %w", err)
}
