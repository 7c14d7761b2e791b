package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	segjson "github.com/segmentio/encoding/json"
)

// The audit log lives in the table audit_segments (migration 3): one row per
// batch the writer flushes, its events as a JSON array, with the batch's
// time range and size beside it. A row per event cost more CPU than the
// tool call it recorded (SQLite's B-tree inserts into a table and four
// indexes); a row per batch costs one insert per flush and a little JSON
// per event. Queries, rare and bounded by
// retention, read the segments of their time range and filter in Go. The
// statements follow queries.go's rules: $n placeholders, times as unix
// milliseconds, nothing driver-specific.

// Kinds of audit events (AuditEvent.Kind).
const (
	AuditToolCall        = "tool_call"        // a tools/call that reached tool lookup
	AuditRefused         = "refused"          // an HTTP request refused before it ran (401, 403, 413, 429)
	AuditAdmin           = "admin"            // a change asked of the admin model, made or refused
	AuditAgentConnect    = "agent_connect"    // an expert agent came online
	AuditAgentDisconnect = "agent_disconnect" // an expert agent went away
	AuditMQTTDenied      = "mqtt_denied"      // a publish or subscribe the broker's ACL refused
	// AuditOAuth is a step of the OAuth sign-in (Action: sign_in, consent,
	// deny, token, refresh, register, revoke), made or refused; ClientID
	// holds the OAuth client.
	AuditOAuth = "oauth"
	// AuditConsole is a step of a console session (Action: sign_in,
	// sign_out, cross_origin), made or refused; UserID holds the person.
	AuditConsole = "console"
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

const (
	qInsertAuditSegment = `INSERT INTO audit_segments (min_ms, max_ms, n, events) VALUES ($1, $2, $3, $4)`
	// Newest first: by the segment's newest event, then by insertion.
	qAuditSegmentsHead = `SELECT id, max_ms, events FROM audit_segments`
	qCountAudit        = `SELECT COALESCE(SUM(n), 0) FROM audit_segments`
	// Oldest first, a chunk of segments at a time so that a large backlog
	// never holds the write lock for long.
	qDeleteAuditBefore = `DELETE FROM audit_segments WHERE id IN
(SELECT id FROM audit_segments WHERE max_ms < $1 ORDER BY max_ms, id LIMIT $2) RETURNING n`
	qAuditStraddling = `SELECT id, events FROM audit_segments WHERE min_ms < $1 AND max_ms >= $1`
	qAuditOldest     = `SELECT id, n, events FROM audit_segments ORDER BY min_ms, id LIMIT $1`
	qDeleteAuditSeg  = `DELETE FROM audit_segments WHERE id = $1`
	qUpdateAuditSeg  = `UPDATE audit_segments SET min_ms = $1, max_ms = $2, n = $3, events = $4 WHERE id = $5`
)

// auditSegmentMax bounds the events of one segment: an event's ID is its
// segment's ID times auditSegmentMax plus its index there.
const auditSegmentMax = 1 << 12

// auditRecord is an event as a segment stores it: short keys, times in
// unix milliseconds and durations in microseconds, empty fields left out.
type auditRecord struct {
	T    int64  `json:"t"`
	Kind string `json:"k"`
	Tok  string `json:"tk,omitempty"`
	User string `json:"u,omitempty"`
	Cli  string `json:"c,omitempty"`
	Sess string `json:"s,omitempty"`
	ET   string `json:"et,omitempty"`
	EI   string `json:"ei,omitempty"`
	Tool string `json:"tl,omitempty"`
	Src  string `json:"src,omitempty"`
	Act  string `json:"a,omitempty"`
	Tgt  string `json:"tg,omitempty"`
	St   int    `json:"st,omitempty"`
	Dur  int64  `json:"d,omitempty"`
	Out  string `json:"o"`
	Why  string `json:"r,omitempty"`
	Req  string `json:"rq,omitempty"`
}

func recordOf(e *AuditEvent) auditRecord {
	return auditRecord{T: e.Time.UnixMilli(), Kind: e.Kind, Tok: e.TokenID, User: e.UserID, Cli: e.ClientID, Sess: e.SessionID,
		ET: e.EntityType, EI: e.EntityID, Tool: e.Tool, Src: e.Source, Act: e.Action, Tgt: e.Target, St: e.Status,
		Dur: e.Duration.Microseconds(), Out: e.Outcome, Why: e.Reason, Req: e.RequestID}
}

func (r *auditRecord) event(id int64) AuditEvent {
	return AuditEvent{ID: id, Time: fromMillis(r.T), Kind: r.Kind, TokenID: r.Tok, UserID: r.User, ClientID: r.Cli,
		SessionID: r.Sess, EntityType: r.ET, EntityID: r.EI, Tool: r.Tool, Source: r.Src, Action: r.Act, Target: r.Tgt,
		Status: r.St, Duration: time.Duration(r.Dur) * time.Microsecond, Outcome: r.Out, Reason: r.Why, RequestID: r.Req}
}

// segmentOf encodes records and returns their time range.
func segmentOf(recs []auditRecord) (minMs, maxMs int64, data []byte, err error) {
	minMs, maxMs = recs[0].T, recs[0].T
	for i := range recs {
		minMs, maxMs = min(minMs, recs[i].T), max(maxMs, recs[i].T)
	}
	// segmentio's encoder writes what encoding/json would, for less; this
	// runs once per record on the audit writer.
	data, err = segjson.Marshal(recs)
	return minMs, maxMs, data, err
}

// InsertAudit writes events in one transaction: all of them or none.
func (s *Store) InsertAudit(ctx context.Context, events []AuditEvent) (err error) {
	defer mapWriteErr(&err)
	if len(events) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: audit insert: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	recs := make([]auditRecord, 0, min(len(events), auditSegmentMax))
	for start := 0; start < len(events); start += auditSegmentMax {
		recs = recs[:0]
		for i := start; i < min(start+auditSegmentMax, len(events)); i++ {
			recs = append(recs, recordOf(&events[i]))
		}
		minMs, maxMs, data, err := segmentOf(recs)
		if err != nil {
			return fmt.Errorf("store: audit insert: encode: %w", err)
		}
		if _, err := tx.ExecContext(ctx, qInsertAuditSegment, minMs, maxMs, len(recs), string(data)); err != nil {
			return fmt.Errorf("store: audit insert: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: audit insert: commit: %w", err)
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
	var curMs, curID int64
	if q.Cursor != "" {
		var ok bool
		if curMs, curID, ok = parseAuditCursor(q.Cursor); !ok {
			return nil, "", fmt.Errorf("%w: cursor %q: pass the next value of a previous answer", ErrInvalidAuditQuery, q.Cursor)
		}
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
		where = append(where, "max_ms >= "+arg(q.Since.UnixMilli()))
	}
	if !q.Until.IsZero() {
		where = append(where, "min_ms < "+arg(q.Until.UnixMilli()))
	}
	if q.Cursor != "" {
		where = append(where, "min_ms <= "+arg(curMs))
	}
	query := qAuditSegmentsHead
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY max_ms DESC, id DESC"
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: audit query: %w", err)
	}
	defer rows.Close()

	newer := func(a, b *AuditEvent) bool { // a comes before b: newest first
		if !a.Time.Equal(b.Time) {
			return a.Time.After(b.Time)
		}
		return a.ID > b.ID
	}
	var out []AuditEvent
	var recs []auditRecord
	for rows.Next() {
		var (
			seg, maxMs int64
			data       string
		)
		if err := rows.Scan(&seg, &maxMs, &data); err != nil {
			return nil, "", fmt.Errorf("store: audit query: %w", err)
		}
		// Segments come newest first by their newest event: once a page
		// is full and this segment's newest event is older than the page's
		// last, no later segment can hold one of the page.
		if len(out) > limit && maxMs < out[limit].Time.UnixMilli() {
			break
		}
		// encoding/json decodes into the elements a reused slice already
		// has and leaves the members a record omits as they were: a
		// record would take the previous segment's ClientID or User.
		clear(recs[:cap(recs)])
		recs = recs[:0]
		if err := json.Unmarshal([]byte(data), &recs); err != nil {
			return nil, "", fmt.Errorf("store: audit query: segment %d: %w", seg, err)
		}
		for i := range recs {
			r := &recs[i]
			id := seg*auditSegmentMax + int64(i)
			switch {
			case !q.Since.IsZero() && r.T < q.Since.UnixMilli(), !q.Until.IsZero() && r.T >= q.Until.UnixMilli(),
				q.User != "" && r.User != q.User, q.Tool != "" && r.Tool != q.Tool,
				q.Outcome != "" && r.Out != q.Outcome, q.Kind != "" && r.Kind != q.Kind,
				q.Cursor != "" && (r.T > curMs || r.T == curMs && id >= curID):
				continue
			}
			out = append(out, r.event(id))
		}
		slices.SortFunc(out, func(a, b AuditEvent) int {
			if newer(&a, &b) {
				return -1
			}
			return 1
		})
		if len(out) > limit+1 {
			out = out[:limit+1] // one more than a page: is there a next one?
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("store: audit query: %w", err)
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
// chunk segments per statement (0 means 500). It returns how many events it
// deleted. Only the oldest go: whole segments where they can, and the
// segments across the line are written again without their old events.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, maxRows int64, chunk int) (deleted int64, err error) {
	defer mapWriteErr(&err)
	if chunk <= 0 {
		chunk = 500
	}
	if !before.IsZero() {
		// What is deleted is summed, not counted before and after: on a
		// shared store other replicas add events meanwhile.
		cut := before.UnixMilli()
		for {
			n, segs, err := s.deleteAuditBefore(ctx, cut, chunk)
			deleted += n
			if err != nil {
				return deleted, fmt.Errorf("store: audit prune by age: %w", err)
			}
			if segs < chunk {
				break
			}
		}
		n, err := s.trimSegments(ctx, qAuditStraddling, []any{cut}, func(r *auditRecord) bool { return r.T < cut })
		deleted += n
		if err != nil {
			return deleted, fmt.Errorf("store: audit prune by age: %w", err)
		}
	}
	if maxRows > 0 {
		total, err := s.CountAudit(ctx)
		if err != nil {
			return deleted, fmt.Errorf("store: audit prune by size: %w", err)
		}
		for total > maxRows {
			n, err := s.dropOldest(ctx, total-maxRows, chunk)
			if err != nil {
				return deleted, fmt.Errorf("store: audit prune by size: %w", err)
			}
			if n == 0 {
				break
			}
			deleted += n
			total -= n
		}
	}
	return deleted, nil
}

// deleteAuditBefore deletes up to chunk whole segments whose every event is
// older than cut (unix ms); it returns the events and the segments deleted.
func (s *Store) deleteAuditBefore(ctx context.Context, cut int64, chunk int) (events int64, segs int, err error) {
	rows, err := s.db.QueryContext(ctx, qDeleteAuditBefore, cut, chunk)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return events, segs, err
		}
		events += n
		segs++
	}
	return events, segs, rows.Err()
}

// dropOldest deletes up to excess of the oldest events: whole segments, and
// the oldest events of the segment that holds more than is left to go.
func (s *Store) dropOldest(ctx context.Context, excess int64, chunk int) (int64, error) {
	rows, err := s.db.QueryContext(ctx, qAuditOldest, chunk)
	if err != nil {
		return 0, err
	}
	type seg struct {
		id, n int64
		data  string
	}
	var segs []seg
	for rows.Next() {
		var sg seg
		if err := rows.Scan(&sg.id, &sg.n, &sg.data); err != nil {
			rows.Close()
			return 0, err
		}
		segs = append(segs, sg)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var deleted int64
	for _, sg := range segs {
		if excess-deleted <= 0 {
			break
		}
		if sg.n <= excess-deleted {
			changed, err := s.rewriteSegment(ctx, sg.id, nil) // nothing kept: deleted
			if err != nil {
				return deleted, err
			}
			if changed { // not gone already
				deleted += sg.n
			}
			continue
		}
		var recs []auditRecord
		if err := json.Unmarshal([]byte(sg.data), &recs); err != nil {
			return deleted, fmt.Errorf("segment %d: %w", sg.id, err)
		}
		// Oldest by time, then by position (insertion).
		order := make([]int, len(recs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(recs[a].T, recs[b].T) })
		drop := make(map[int]bool, excess-deleted)
		for _, i := range order[:excess-deleted] {
			drop[i] = true
		}
		var keep []auditRecord
		for i := range recs {
			if !drop[i] {
				keep = append(keep, recs[i])
			}
		}
		changed, err := s.rewriteSegment(ctx, sg.id, keep)
		if err != nil {
			return deleted, err
		}
		if changed {
			deleted += int64(len(recs) - len(keep))
		}
	}
	return deleted, nil
}

// trimSegments rewrites the segments query selects without the records
// drop picks, and returns how many records it dropped.
func (s *Store) trimSegments(ctx context.Context, query string, args []any, drop func(*auditRecord) bool) (dropped int64, err error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	type seg struct {
		id   int64
		data string
	}
	var segs []seg
	for rows.Next() {
		var sg seg
		if err := rows.Scan(&sg.id, &sg.data); err != nil {
			rows.Close()
			return 0, err
		}
		segs = append(segs, sg)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, sg := range segs {
		var recs []auditRecord
		if err := json.Unmarshal([]byte(sg.data), &recs); err != nil {
			return dropped, fmt.Errorf("segment %d: %w", sg.id, err)
		}
		keep := recs[:0:0]
		for i := range recs {
			if !drop(&recs[i]) {
				keep = append(keep, recs[i])
			}
		}
		changed, err := s.rewriteSegment(ctx, sg.id, keep)
		if err != nil {
			return dropped, err
		}
		if changed { // another replica may have trimmed it first
			dropped += int64(len(recs) - len(keep))
		}
	}
	return dropped, nil
}

// rewriteSegment stores what is left of a segment, or deletes it when
// nothing is; changed is false when the segment was gone already. Event IDs
// of the kept records change: paging cursors that pointed into it may skip
// or repeat an event of that segment.
func (s *Store) rewriteSegment(ctx context.Context, id int64, keep []auditRecord) (changed bool, err error) {
	var res sql.Result
	if len(keep) == 0 {
		res, err = s.db.ExecContext(ctx, qDeleteAuditSeg, id)
	} else {
		minMs, maxMs, data, encErr := segmentOf(keep)
		if encErr != nil {
			return false, encErr
		}
		res, err = s.db.ExecContext(ctx, qUpdateAuditSeg, minMs, maxMs, len(keep), string(data), id)
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return err == nil && n > 0, nil
}

// CountAudit returns how many events the audit log holds.
func (s *Store) CountAudit(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, qCountAudit).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: audit count: %w", err)
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
