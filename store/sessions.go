package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
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

// endedWriteTimeout bounds one batch of ended sessions: its writer may be
// writing other callers' rows, so the batch does not end with the writer's
// own context.
const endedWriteTimeout = 10 * time.Second

// endedWriter groups concurrent EndSession calls into one transaction (a
// group commit): each call adds its row to the batch being collected, then
// waits for the write slot; whoever gets the slot writes the whole batch
// and the others find theirs written. With many short sessions a commit
// per DELETE cost more than the requests it ended (docs/benchmarks.md).
type endedWriter struct {
	slot chan struct{} // capacity 1: held while a batch is written

	mu         sync.Mutex
	collecting *endedBatch // the batch new rows join; nil: none yet
}

type endedBatch struct {
	rows []endedRow
	done chan struct{} // closed once written; err is set then
	err  error
}

type endedRow struct {
	key         string
	ms, untilMs int64
}

// EndSession records that the MCP session with this key was ended by its
// client, so that every gateway sharing the store refuses it. until is when
// the row stops mattering (the session could not be presented after it
// anyway); rows past it no longer count, and are deleted by an end at most
// once per endedPurgeEvery. It returns once the row is written (with the
// rows of other calls running at the same time: see endedWriter).
func (s *Store) EndSession(ctx context.Context, key string, until time.Time) (err error) {
	defer mapWriteErr(&err)
	if key == "" {
		return errors.New("store: empty session key")
	}
	_, ms := now()
	w := &s.ended
	w.mu.Lock()
	b := w.collecting
	if b == nil {
		b = &endedBatch{done: make(chan struct{})}
		w.collecting = b
	}
	b.rows = append(b.rows, endedRow{key: key, ms: ms, untilMs: until.UnixMilli()})
	w.mu.Unlock()

	select {
	case w.slot <- struct{}{}:
	case <-b.done: // written by another while this call waited
		return b.err
	case <-ctx.Done():
		// The row stays in its batch: a later call writes it.
		return fmt.Errorf("store: end session: %w", ctx.Err())
	}
	defer func() { <-w.slot }()
	select {
	case <-b.done:
		return b.err
	default:
	}
	w.mu.Lock()
	if w.collecting == b {
		w.collecting = nil // closed to new rows: they start the next batch
	}
	w.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endedWriteTimeout)
	defer cancel()
	b.err = s.writeEnded(wctx, b.rows, ms)
	close(b.done)
	return b.err
}

// writeEnded writes rows in one transaction, and purges the rows past
// their time when the last purge is endedPurgeEvery old.
func (s *Store) writeEnded(ctx context.Context, rows []endedRow, ms int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: end session: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, qInsertEndedSession)
	if err != nil {
		return fmt.Errorf("store: end session: %w", err)
	}
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.key, r.ms, r.untilMs); err != nil {
			return fmt.Errorf("store: end session: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: end session: %w", err)
	}
	if last := s.endedPurged.Load(); ms-last >= endedPurgeEvery.Milliseconds() && s.endedPurged.CompareAndSwap(last, ms) {
		if _, err := s.db.ExecContext(ctx, qPurgeEndedSessions, ms); err != nil {
			// The sessions are recorded; a failed purge only leaves rows for
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
	return false, fmt.Errorf("store: session ended?: %w", err)
}
