package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// lastUsedEvery is the resolution of Token.LastUsed: a token's use is
	// written at most this often, whatever its request rate.
	lastUsedEvery = time.Minute
	// lastUsedBatchDelay gathers the uses that arrive close together (a
	// burst of new sessions) into one transaction.
	lastUsedBatchDelay = 200 * time.Millisecond
	// lastUsedWriteTimeout bounds one batch, including waiting for the
	// database's write lock held by another process.
	lastUsedWriteTimeout = 5 * time.Second
)

// usageWriter records token uses in the database off the request path.
// Requests queue a use (at most one per token per lastUsedEvery); one
// goroutine, started by Open and stopped by Close, writes the queue in
// batches. LastUsed is advisory: a batch that fails is logged and dropped.
type usageWriter struct {
	mu      sync.Mutex
	pending map[string]int64 // token ID -> newest use (unix ms) not yet written
	// queued holds when each token's last use was queued, so that a row
	// read again from the database before its write landed does not queue
	// a second write within lastUsedEvery. Entries older than that are
	// pruned at every batch.
	queued map[string]int64

	wake   chan struct{} // capacity 1: "pending is not empty"
	done   chan struct{} // closed by stopTokens
	exited chan struct{} // closed when the goroutine has returned
	stop   sync.Once

	writes atomic.Int64 // rows written; tests read it
}

func (s *Store) startUsageWriter() {
	w := &s.tokens.usage
	w.pending = make(map[string]int64)
	w.queued = make(map[string]int64)
	w.wake = make(chan struct{}, 1)
	w.done = make(chan struct{})
	w.exited = make(chan struct{})
	go s.runUsageWriter()
}

// stopTokens stops the LastUsed writer after a last batch (bounded by
// lastUsedWriteTimeout). It is idempotent; Close calls it before closing the
// database.
func (s *Store) stopTokens() {
	w := &s.tokens.usage
	w.stop.Do(func() { close(w.done) })
	<-w.exited
}

// noteTokenUse records that e was used at nowMs and returns the LastUsed to
// report. The common case (used less than a minute ago) is one atomic load.
func (s *Store) noteTokenUse(e *tokenEntry, nowMs int64) int64 {
	last := e.lastUsed.Load()
	if nowMs-last < lastUsedEvery.Milliseconds() {
		return last
	}
	if !e.lastUsed.CompareAndSwap(last, nowMs) {
		return e.lastUsed.Load() // a concurrent request recorded it
	}
	s.tokens.usage.queue(e.tok.ID, nowMs)
	return nowMs
}

// queue schedules a write of id's LastUsed, unless one was queued less than
// lastUsedEvery ago.
func (w *usageWriter) queue(id string, ms int64) {
	w.mu.Lock()
	if ms-w.queued[id] < lastUsedEvery.Milliseconds() {
		w.mu.Unlock()
		return
	}
	w.queued[id] = ms
	w.pending[id] = ms
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // already signalled
	}
}

// lastQueued returns when a use of id was last queued (0 if not recently).
func (w *usageWriter) lastQueued(id string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queued[id]
}

func (s *Store) runUsageWriter() {
	w := &s.tokens.usage
	defer close(w.exited)
	for {
		select {
		case <-w.wake:
		case <-w.done:
			s.writeUsage() // what came in since the last batch
			return
		}
		t := time.NewTimer(lastUsedBatchDelay)
		select {
		case <-t.C:
		case <-w.done:
			t.Stop()
		}
		s.writeUsage()
	}
}

// writeUsage writes the pending uses in one transaction.
func (s *Store) writeUsage() {
	w := &s.tokens.usage
	w.mu.Lock()
	batch := w.pending
	if len(batch) == 0 {
		w.mu.Unlock()
		return
	}
	w.pending = make(map[string]int64, len(batch))
	cutoff := time.Now().Add(-lastUsedEvery).UnixMilli()
	for id, ms := range w.queued {
		if ms < cutoff {
			delete(w.queued, id)
		}
	}
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), lastUsedWriteTimeout)
	defer cancel()
	if err := s.writeUsageBatch(ctx, batch); err != nil {
		s.log.WithError(err).WithField("tokens", len(batch)).Warn("could not record token last-used times")
		return
	}
	w.writes.Add(int64(len(batch)))
}

func (s *Store) writeUsageBatch(ctx context.Context, batch map[string]int64) (err error) {
	defer mapWriteErr(&err)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, qTouchToken)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer stmt.Close()
	for id, ms := range batch {
		if _, err := stmt.ExecContext(ctx, id, ms); err != nil {
			return fmt.Errorf("token %s: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
