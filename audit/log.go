// Package audit records what happened in a toolbus process — every
// tools/call, admin change, refused request, ACL refusal and expert-agent
// connect or disconnect — in the store (table audit_segments: one row per
// flushed batch).
//
// The write path never blocks a request: records go to a bounded queue that
// one goroutine writes in batches, each batch in one transaction, every
// FlushInterval or as soon as a batch is full. When the queue is full a
// record is dropped, counted (Stats.Dropped, the metric
// toolbus_audit_dropped_total) and warned of in the log, at most once per
// warnEvery. So a crash loses at most the records of the last FlushInterval
// (plus the batch being written), and nothing is lost unnoticed.
package audit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/store"
)

// Defaults of Options.
const (
	DefaultFlushInterval = 500 * time.Millisecond
	DefaultBatchSize     = 1000
	DefaultQueueSize     = 100000
	DefaultRetention     = 30 * 24 * time.Hour
	DefaultPruneInterval = time.Minute
	DefaultWriteTimeout  = 10 * time.Second
)

// warnEvery bounds how often a full queue or a failing write is logged.
const warnEvery = 10 * time.Second

// ErrLost is returned by Close when records could not be written before
// its deadline or because the store failed; how many is in the message and
// in Stats.Dropped.
var ErrLost = errors.New("audit records lost")

// Store is where the records go. *store.Store satisfies it.
type Store interface {
	InsertAudit(ctx context.Context, events []store.AuditEvent) error
	PruneAudit(ctx context.Context, before time.Time, maxRows int64, chunk int) (int64, error)
}

// Options configures a Log. Only Store is required.
type Options struct {
	Store Store
	// FlushInterval is the longest a record waits in the queue; 0 means
	// DefaultFlushInterval.
	FlushInterval time.Duration
	// BatchSize is the most records written in one transaction, and the
	// queue length that starts a write before FlushInterval; 0 means
	// DefaultBatchSize.
	BatchSize int
	// QueueSize bounds the records waiting (queued or being written);
	// beyond it new records are dropped and counted. 0 means
	// DefaultQueueSize.
	QueueSize int
	// Retention is how long records are kept; 0 means DefaultRetention,
	// negative keeps them forever.
	Retention time.Duration
	// MaxRows bounds the records kept (the oldest go first); 0 means no
	// bound.
	MaxRows int64
	// PruneInterval is how often Retention and MaxRows are enforced; 0
	// means DefaultPruneInterval. The first prune runs at start.
	PruneInterval time.Duration
	// WriteTimeout bounds one batch's transaction and one prune; 0 means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// AggregateWindow is the window over which repeated refusals of one
	// kind from one source are counted rather than recorded one by one: the
	// count is one record, written when the window ends, whose Reason ends
	// with "(×N more from SOURCE in 10s)". 0 means DefaultAggregateWindow;
	// negative records every refusal by itself.
	AggregateWindow time.Duration
	// AggregateAfter is how many refusals of one kind from one source are
	// recorded one by one in a window before the rest are counted; 0 means
	// DefaultAggregateAfter.
	AggregateAfter int
	// AggregateKeys bounds the sources (and kinds of refusal) tracked in a
	// window: refusals of further ones are counted into one record per
	// kind. One source holds at most 16 of them; its further kinds of
	// refusal are counted together, in one record per kind that names the
	// source. 0 means DefaultAggregateKeys.
	AggregateKeys int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client of a refused HTTP request (Refused), as the source its
	// refusals are aggregated by; nil means none: the connection's peer is
	// the source, and behind a proxy every client shares the proxy's.
	TrustedProxies []netip.Prefix
	// Now is the clock of the retention cutoff; nil means time.Now.
	Now func() time.Time
	// Logger receives warnings (component "audit"); nil discards them.
	Logger *logrus.Entry
}

// Stats are the Log's counters.
type Stats struct {
	Depth       int64  // records queued or being written
	Written     uint64 // records written
	Dropped     uint64 // records lost: queue full, or unwritten at Close
	WriteErrors uint64 // batches whose write failed (retried)
	Pruned      uint64 // records deleted by retention
	// Aggregated counts the refusals counted into another record (see
	// Options.AggregateWindow) rather than recorded by themselves.
	Aggregated uint64
}

// Log is the audit log's write path. It is a gateway.Observer; its methods
// are safe for concurrent use and never block on the store.
type Log struct {
	opts Options
	log  *logrus.Entry

	mu     sync.Mutex
	queue  []store.AuditEvent
	spare  []store.AuditEvent // the last written batch's array, emptied: the next queue
	closed bool
	depth  atomic.Int64

	written, dropped, writeErrors, pruned, aggregated atomic.Uint64

	agg *aggregator // nil: every refusal is recorded by itself

	warnMu      sync.Mutex
	lastWarn    time.Time
	warnDropped uint64 // Dropped at lastWarn

	watchers  sync.WaitGroup // WatchPresence goroutines
	stopWatch chan struct{}  // closed by Close first: the watchers stop

	writtenMu sync.Mutex
	writtenCh chan struct{} // closed at the next write (Written); nil until asked

	kick     chan struct{} // capacity 1: a batch is full
	done     chan struct{} // closed by Close
	exited   chan struct{} // closed when the writer has returned
	closeCtx context.Context
	once     sync.Once
	closeErr error
}

// New starts a Log's writer. Close stops it.
func New(opts Options) (*Log, error) {
	if opts.Store == nil {
		return nil, errors.New("audit: Options.Store is required")
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Retention == 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxRows < 0 {
		return nil, errors.New("audit: negative MaxRows")
	}
	if opts.PruneInterval <= 0 {
		opts.PruneInterval = DefaultPruneInterval
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.AggregateWindow == 0 {
		opts.AggregateWindow = DefaultAggregateWindow
	}
	if opts.AggregateAfter <= 0 {
		opts.AggregateAfter = DefaultAggregateAfter
	}
	if opts.AggregateKeys <= 0 {
		opts.AggregateKeys = DefaultAggregateKeys
	}
	log := logutil.OrDiscard(opts.Logger)
	l := &Log{
		opts:      opts,
		log:       log.WithField("component", "audit"),
		kick:      make(chan struct{}, 1),
		stopWatch: make(chan struct{}),
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
	}
	if opts.AggregateWindow > 0 {
		l.agg = newAggregator(opts.AggregateWindow, opts.AggregateAfter, opts.AggregateKeys)
	}
	go l.run()
	return l, nil
}

// Stats returns the Log's counters.
func (l *Log) Stats() Stats {
	return Stats{Depth: l.depth.Load(), Written: l.written.Load(), Dropped: l.dropped.Load(),
		WriteErrors: l.writeErrors.Load(), Pruned: l.pruned.Load(), Aggregated: l.aggregated.Load()}
}

// Record queues e for writing. It never blocks: when the queue is full (or
// the Log closed) e is dropped and counted. Its text fields are cut to a
// short bound, and a refusal (Outcome refused, Kind refused, mqtt_denied
// or oauth) is aggregated with the others of its Kind, Action, Status and
// reason from the same Source (see Options.AggregateWindow).
func (l *Log) Record(e store.AuditEvent) {
	l.record(e, e.Source, "")
}

// record is Record with the aggregation key's source (a remote address)
// and who (an authenticated actor, or "").
func (l *Log) record(e store.AuditEvent, source, who string) {
	clipEvent(&e)
	if l.agg != nil && aggregatable(&e) {
		k := aggKey{kind: e.Kind, action: e.Action, reason: reasonClass(e.Reason), who: who, source: source, status: e.Status}
		if !l.agg.add(&e, k) {
			l.aggregated.Add(1)
			return
		}
	}
	l.enqueue(e)
}

// enqueue queues e as it is.
func (l *Log) enqueue(e store.AuditEvent) {
	l.mu.Lock()
	if l.closed || l.depth.Load() >= int64(l.opts.QueueSize) {
		l.mu.Unlock()
		l.dropped.Add(1)
		l.warnDrop()
		return
	}
	l.queue = append(l.queue, e)
	l.depth.Add(1)
	full := len(l.queue) == l.opts.BatchSize
	l.mu.Unlock()
	if full {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// warnDrop logs the drops, at most once per warnEvery.
func (l *Log) warnDrop() {
	l.warnMu.Lock()
	defer l.warnMu.Unlock()
	now := time.Now()
	if now.Sub(l.lastWarn) < warnEvery {
		return
	}
	total := l.dropped.Load()
	l.log.WithFields(logrus.Fields{"dropped": total - l.warnDropped, "droppedTotal": total, "queueSize": l.opts.QueueSize}).
		Warn("audit queue full: records dropped (the store cannot keep up; see toolbus_audit_dropped_total)")
	l.lastWarn, l.warnDropped = now, total
}

// Close stops taking records, writes every queued one (until ctx ends) and
// stops the writer. Records it could not write are counted as dropped and
// reported with ErrLost. It is idempotent.
func (l *Log) Close(ctx context.Context) error {
	l.once.Do(func() {
		close(l.stopWatch)
		l.watchers.Wait() // their last records go in the last batch
		if l.agg != nil {
			for _, e := range l.agg.close() { // the last window's counts too
				l.enqueue(e)
			}
		}
		l.mu.Lock()
		l.closed = true
		l.closeCtx = ctx
		l.mu.Unlock()
		close(l.done)
		// The writer's last writes run under ctx (each also under
		// WriteTimeout), so this wait ends with ctx at the latest.
		<-l.exited
	})
	return l.closeErr
}

// run is the writer: one batch at a time, then the retention.
func (l *Log) run() {
	defer close(l.exited)
	flush := time.NewTicker(l.opts.FlushInterval)
	defer flush.Stop()
	prune := time.NewTicker(l.opts.PruneInterval)
	defer prune.Stop()
	var window <-chan time.Time // nil without aggregation
	if l.agg != nil {
		t := time.NewTicker(l.opts.AggregateWindow)
		defer t.Stop()
		window = t.C
	}
	var pending []store.AuditEvent // taken from the queue, not yet written
	l.prune()
	for {
		select {
		case <-l.done:
			pending = l.write(l.closeCtx, pending)
			if n := len(pending); n > 0 {
				l.dropped.Add(uint64(n))
				l.depth.Add(-int64(n))
				l.closeErr = fmt.Errorf("%w: %d records not written at close", ErrLost, n)
				l.log.WithField("records", n).Error("audit: records not written at close")
			}
			return
		case <-flush.C:
			pending = l.write(context.Background(), pending)
		case <-l.kick:
			pending = l.write(context.Background(), pending)
		case <-prune.C:
			l.prune()
		case <-window:
			for _, e := range l.agg.flush() {
				l.enqueue(e)
			}
		}
	}
}

// write takes the queue and writes it after pending, BatchSize records per
// transaction. It returns what is left after a failure (retried at the next
// flush), or nothing.
func (l *Log) write(ctx context.Context, pending []store.AuditEvent) []store.AuditEvent {
	// Only a queue taken whole is recycled: after a failed write, pending
	// is the tail of an array whose head still holds written records.
	fresh := len(pending) == 0
	l.mu.Lock()
	if fresh {
		pending, l.queue, l.spare = l.queue, l.spare, nil
	} else {
		pending, l.queue = append(pending, l.queue...), nil
	}
	l.mu.Unlock()
	written := pending
	for len(pending) > 0 {
		if ctx.Err() != nil {
			return pending
		}
		batch := pending[:min(len(pending), l.opts.BatchSize)]
		wctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout)
		err := l.opts.Store.InsertAudit(wctx, batch)
		cancel()
		if err != nil {
			l.writeErrors.Add(1)
			l.warnWrite(err, len(pending))
			return pending
		}
		l.written.Add(uint64(len(batch)))
		l.depth.Add(-int64(len(batch)))
		pending = pending[len(batch):]
		l.signalWritten()
	}
	if fresh {
		l.recycle(written)
	}
	return nil
}

// recycle keeps a written queue's array for the next queue: a queue
// rebuilt from nil at every flush is one of the larger garbage sources per
// tools/call (appends that double ~300-byte records). Arrays grown by a
// burst beyond a few batches are left to the GC.
func (l *Log) recycle(q []store.AuditEvent) {
	if cap(q) == 0 || cap(q) > 4*l.opts.BatchSize {
		return
	}
	clear(q) // the records' strings go with the records
	l.mu.Lock()
	if l.spare == nil {
		l.spare = q[:0]
	}
	l.mu.Unlock()
}

func (l *Log) warnWrite(err error, waiting int) {
	l.warnMu.Lock()
	defer l.warnMu.Unlock()
	if time.Since(l.lastWarn) < warnEvery {
		return
	}
	l.lastWarn = time.Now()
	l.log.WithError(err).WithField("waiting", waiting).Warn("audit: write failed; retrying at the next flush")
}

// prune enforces Retention and MaxRows.
func (l *Log) prune() {
	var before time.Time
	if l.opts.Retention > 0 {
		before = l.opts.Now().Add(-l.opts.Retention)
	}
	if before.IsZero() && l.opts.MaxRows == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.WriteTimeout)
	defer cancel()
	n, err := l.opts.Store.PruneAudit(ctx, before, l.opts.MaxRows, 0)
	l.pruned.Add(uint64(n))
	if err != nil {
		l.log.WithError(err).Warn("audit: retention failed; retrying at the next prune")
		return
	}
	if n > 0 {
		l.log.WithField("deleted", n).Debug("audit: retention deleted old records")
	}
}

// Written returns a channel closed at the next write of records to the
// store (after the batch's transaction committed), as
// requester.PresenceChanged does for presence: a waiter wakes, reads what
// was written, and asks again for the next one. Nothing is allocated while
// no one asks.
func (l *Log) Written() <-chan struct{} {
	l.writtenMu.Lock()
	defer l.writtenMu.Unlock()
	if l.writtenCh == nil {
		l.writtenCh = make(chan struct{})
	}
	return l.writtenCh
}

// signalWritten wakes the waiters of Written.
func (l *Log) signalWritten() {
	l.writtenMu.Lock()
	defer l.writtenMu.Unlock()
	if l.writtenCh != nil {
		close(l.writtenCh)
		l.writtenCh = nil
	}
}
