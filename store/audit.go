package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
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
//
// Filters by value (kind, outcome, user, tool, agent) go through the table
// audit_keys (migration 13): one row per distinct value of a segment,
// indexed by (field, value, max_ms, seg). A filtered page reads, newest
// first, only the segments that hold the value (and, through EXISTS on the
// same table, the other values asked), so it stays fast however many
// events the log holds; a flush adds one key row per distinct value in it,
// a few dozen for a batch of a thousand calls.

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
	// Agent is the expert agent that serves Tool (a tool call's Source
	// agent); "" for a platform tool and other kinds.
	Agent string
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
	Agent                     string
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
	qInsertAuditSegment = `INSERT INTO audit_segments (min_ms, max_ms, n, events) VALUES ($1, $2, $3, $4) RETURNING id`
	// The keyed path of a filtered query (QueryAudit): the segments that
	// hold the first value asked, newest first through audit_keys_value.
	// Its rows carry the positions of each value asked (auditPositions),
	// not the events: a segment where no record holds them all is skipped
	// unread, and the others are read by ID (qAuditSegment).
	qAuditKeyedHead  = `SELECT k.seg, k.max_ms, k.n, k.pos`
	qAuditKeyedFrom  = ` FROM audit_keys k`
	qAuditSegment    = `SELECT events FROM audit_segments WHERE id = $1`
	qDeleteAuditKeys = `DELETE FROM audit_keys WHERE seg = $1`
	qRaiseAuditSpan  = `UPDATE audit_meta SET value = $1 WHERE name = 'max_span_ms' AND value < $1`
	// qAuditSpan is max_span_ms inside a query (one snapshot with it).
	qAuditSpan = `(SELECT value FROM audit_meta WHERE name = 'max_span_ms')`
	// qAuditDensity is the max_ms of a value's 101st newest segment: the
	// value whose is oldest is the sparsest, and drives the query.
	qAuditDensity = `SELECT max_ms FROM audit_keys WHERE field = $1 AND value = $2 ORDER BY max_ms DESC, seg DESC LIMIT 1 OFFSET 100`
	// The live tail (AuditAfter): segments written after a mark, in order.
	qAuditAfter  = `SELECT id, events FROM audit_segments WHERE id > $1 ORDER BY id LIMIT $2`
	qAuditMaxSeg = `SELECT COALESCE(MAX(id), 0) FROM audit_segments`
	// Migration 13's backfill: segments in order of ID, a chunk at a time.
	qAuditBackfill = `SELECT id, min_ms, max_ms, events FROM audit_segments WHERE id > $1 ORDER BY id LIMIT $2`
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
	Ag   string `json:"ag,omitempty"`
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
		ET: e.EntityType, EI: e.EntityID, Tool: e.Tool, Ag: e.Agent, Src: e.Source, Act: e.Action, Tgt: e.Target, St: e.Status,
		Dur: e.Duration.Microseconds(), Out: e.Outcome, Why: e.Reason, Req: e.RequestID}
}

func (r *auditRecord) event(id int64) AuditEvent {
	return AuditEvent{ID: id, Time: fromMillis(r.T), Kind: r.Kind, TokenID: r.Tok, UserID: r.User, ClientID: r.Cli,
		SessionID: r.Sess, EntityType: r.ET, EntityID: r.EI, Tool: r.Tool, Agent: r.Ag, Source: r.Src, Action: r.Act, Target: r.Tgt,
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
	var span int64
	for start := 0; start < len(events); start += auditSegmentMax {
		recs = recs[:0]
		for i := start; i < min(start+auditSegmentMax, len(events)); i++ {
			recs = append(recs, recordOf(&events[i]))
		}
		minMs, maxMs, data, err := segmentOf(recs)
		if err != nil {
			return fmt.Errorf("store: audit insert: encode: %w", err)
		}
		var seg int64
		if err := tx.QueryRowContext(ctx, qInsertAuditSegment, minMs, maxMs, len(recs), string(data)).Scan(&seg); err != nil {
			return fmt.Errorf("store: audit insert: %w", err)
		}
		if err := insertAuditKeys(ctx, tx, seg, minMs, maxMs, recs); err != nil {
			return fmt.Errorf("store: audit insert: keys: %w", err)
		}
		span = max(span, maxMs-minMs)
	}
	if span > 0 {
		if _, err := tx.ExecContext(ctx, qRaiseAuditSpan, span); err != nil {
			return fmt.Errorf("store: audit insert: span: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: audit insert: commit: %w", err)
	}
	return nil
}

// QueryAudit returns the events q selects, newest first (by time, then by
// insertion), and the cursor of the next page ("" when this is the last).
// Without a value filter it reads the segments of its time range newest
// first (audit_segments_max); with one, only the segments that hold the
// values asked (audit_keys_value). Either way it stops at the first
// segment older than a full page.
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
	f := auditFilter{q: &q}
	if q.Cursor != "" {
		var ok bool
		if f.curMs, f.curID, ok = parseAuditCursor(q.Cursor); !ok {
			return nil, "", fmt.Errorf("%w: cursor %q: pass the next value of a previous answer", ErrInvalidAuditQuery, q.Cursor)
		}
	}
	keys := q.keyFilters()
	if len(keys) > 1 {
		keys = s.sparsestFirst(ctx, keys)
	}
	query, args := auditQuerySQL(&q, keys, f.curMs)
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
	keyed := len(keys) > 0
	var (
		n           int
		pos         = make([]sql.NullString, len(keys))
		dest        []any
		bits, other []uint64
		elems       [][2]int
	)
	for rows.Next() {
		var (
			seg, maxMs int64
			data       string
		)
		if keyed {
			dest = append(dest[:0], &seg, &maxMs, &n)
			for i := range pos {
				dest = append(dest, &pos[i])
			}
		} else {
			dest = append(dest[:0], &seg, &maxMs, &data)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, "", fmt.Errorf("store: audit query: %w", err)
		}
		// Segments come newest first by their newest event: once a page
		// is full and this segment's newest event is older than the page's
		// last, no later segment can hold one of the page.
		if len(out) > limit && maxMs < out[limit].Time.UnixMilli() {
			break
		}
		if keyed {
			// Only a segment where one record holds every value asked is
			// read.
			var hit bool
			if bits, other, hit = intersectPositions(pos, n, bits, other); !hit {
				continue
			}
			if err := s.db.QueryRowContext(ctx, qAuditSegment, seg).Scan(&data); errors.Is(err, sql.ErrNoRows) {
				continue // pruned meanwhile
			} else if err != nil {
				return nil, "", fmt.Errorf("store: audit query: %w", err)
			}
		}
		added := false
		if keyed {
			// Only the records at the positions are decoded: a rare value
			// costs a record, not its segment's hundreds.
			var r auditRecord
			if elems = splitSegment(data, elems[:0]); len(elems) != n {
				// Not as segmentOf writes segments: decoded whole.
				if recs, err = decodeSegment(data, recs); err != nil {
					return nil, "", fmt.Errorf("store: audit query: segment %d: %w", seg, err)
				}
				elems = elems[:0]
			}
			for i := range n {
				if bits[i/64]&(1<<(i%64)) == 0 {
					continue
				}
				switch {
				case len(elems) == n:
					r = auditRecord{}
					if err := segjson.Unmarshal([]byte(data[elems[i][0]:elems[i][1]]), &r); err != nil {
						return nil, "", fmt.Errorf("store: audit query: segment %d: %w", seg, err)
					}
				case i < len(recs):
					r = recs[i]
				default:
					continue
				}
				id := seg*auditSegmentMax + int64(i)
				if f.match(&r, id) {
					out = append(out, r.event(id))
					added = true
				}
			}
		} else {
			if recs, err = decodeSegment(data, recs); err != nil {
				return nil, "", fmt.Errorf("store: audit query: segment %d: %w", seg, err)
			}
			for i := range recs {
				id := seg*auditSegmentMax + int64(i)
				if f.match(&recs[i], id) {
					out = append(out, recs[i].event(id))
					added = true
				}
			}
		}
		if !added {
			continue
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

// decodeSegment decodes a segment's events into recs (reused).
func decodeSegment(data string, recs []auditRecord) ([]auditRecord, error) {
	// The decoder fills the elements a reused slice already has and
	// leaves the members a record omits as they were: a record would take
	// the previous segment's ClientID or User.
	clear(recs[:cap(recs)])
	recs = recs[:0]
	// segmentio's decoder reads what encoding/json would, for less: a
	// filtered page may decode thousands of records.
	err := segjson.Unmarshal([]byte(data), &recs)
	return recs, err
}

// recordStart begins every record of a segment: segmentOf writes the
// members in auditRecord's order, T (never omitted) first. Inside a
// string a quote is escaped, so the text cannot occur there.
const recordStart = `{"t":`

// splitSegment appends the byte ranges of the records of a segment's JSON
// array to into, found by recordStart alone (strings.Index: fast, where a
// full decode of a segment of hundreds costs the page its budget). The
// caller checks the count against the segment's size and decodes the
// whole segment when they differ.
func splitSegment(data string, into [][2]int) [][2]int {
	last := strings.LastIndexByte(data, ']')
	if last < 0 {
		return into
	}
	from := -1
	for i := 0; ; {
		j := strings.Index(data[i:last], recordStart)
		if j < 0 {
			break
		}
		if from >= 0 {
			into = append(into, [2]int{from, i + j})
		}
		from = i + j
		i += j + len(recordStart)
	}
	if from >= 0 {
		into = append(into, [2]int{from, last})
	}
	// Each range ends at the next record's start: up to its '}'.
	for k := range into {
		into[k][1] = strings.LastIndexByte(data[:into[k][1]], '}') + 1
	}
	return into
}

// Audit key fields: audit_keys.field, for the record member it indexes.
const (
	auditKeyKind    = "k"
	auditKeyOutcome = "o"
	auditKeyUser    = "u"
	auditKeyTool    = "t"
	auditKeyAgent   = "a"
)

// auditKeyFields are the indexed members of a record.
var auditKeyFields = []struct {
	field string
	of    func(*auditRecord) string
}{
	{auditKeyKind, func(r *auditRecord) string { return r.Kind }},
	{auditKeyOutcome, func(r *auditRecord) string { return r.Out }},
	{auditKeyUser, func(r *auditRecord) string { return r.User }},
	{auditKeyTool, func(r *auditRecord) string { return r.Tool }},
	{auditKeyAgent, func(r *auditRecord) string { return r.Ag }},
}

// keyFilters are q's value filters, the one the query is driven by first:
// the likely rarest (an agent, a tool, a user), then outcome and kind.
func (q *AuditQuery) keyFilters() [][2]string {
	var out [][2]string
	for _, f := range [][2]string{{auditKeyAgent, q.Agent}, {auditKeyTool, q.Tool}, {auditKeyUser, q.User},
		{auditKeyOutcome, q.Outcome}, {auditKeyKind, q.Kind}} {
		if f[1] != "" {
			out = append(out, f)
		}
	}
	return out
}

// sparsestFirst orders keys with the one whose values are the sparsest
// among the newest segments first: a query driven by it reads the fewest
// key rows. An error leaves the order as it was (the query reports it).
func (s *Store) sparsestFirst(ctx context.Context, keys [][2]string) [][2]string {
	best, bestMs := 0, int64(0)
	for i, k := range keys {
		var ms int64
		switch err := s.db.QueryRowContext(ctx, qAuditDensity, k[0], k[1]).Scan(&ms); {
		case errors.Is(err, sql.ErrNoRows): // 100 segments or fewer
			ms = -1
		case err != nil:
			return keys
		}
		if i == 0 || ms < bestMs {
			best, bestMs = i, ms
		}
		if ms < 0 {
			break
		}
	}
	out := append([][2]string{keys[best]}, keys[:best]...)
	return append(out, keys[best+1:]...)
}

// auditQuerySQL is the statement of QueryAudit, driven by keys[0] when
// there are keys: every filter combination is served by an index
// (TestAuditQueryPlans).
func auditQuerySQL(q *AuditQuery, keys [][2]string, curMs int64) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	head, order, maxCol, minCol := qAuditSegmentsHead, " ORDER BY max_ms DESC, id DESC", "max_ms", "min_ms"
	if len(keys) > 0 {
		order, maxCol, minCol = " ORDER BY k.max_ms DESC, k.seg DESC", "k.max_ms", "k.min_ms"
		// The positions of the other values: NULL where the segment has
		// none (the segment is then skipped).
		head = qAuditKeyedHead
		for _, k := range keys[1:] {
			head += ", (SELECT x.pos FROM audit_keys x WHERE x.seg = k.seg AND x.field = " + arg(k[0]) + " AND x.value = " + arg(k[1]) + ")"
		}
		head += qAuditKeyedFrom
		where = append(where, "k.field = "+arg(keys[0][0]), "k.value = "+arg(keys[0][1]))
	}
	if !q.Since.IsZero() {
		where = append(where, maxCol+" >= "+arg(q.Since.UnixMilli()))
	}
	// Bounded above too: a segment that starts before a time ends before
	// it plus max_span_ms.
	if !q.Until.IsZero() {
		a := arg(q.Until.UnixMilli())
		where = append(where, minCol+" < "+a, maxCol+" < "+a+" + "+qAuditSpan)
	}
	if q.Cursor != "" {
		a := arg(curMs)
		where = append(where, minCol+" <= "+a, maxCol+" <= "+a+" + "+qAuditSpan)
	}
	query := head
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	return query + order, args
}

// auditFilter is an AuditQuery as a test of one record.
type auditFilter struct {
	q            *AuditQuery
	curMs, curID int64 // the cursor's position; zero without one
}

func (f *auditFilter) match(r *auditRecord, id int64) bool {
	q := f.q
	switch {
	case !q.Since.IsZero() && r.T < q.Since.UnixMilli(), !q.Until.IsZero() && r.T >= q.Until.UnixMilli(),
		q.User != "" && r.User != q.User, q.Tool != "" && r.Tool != q.Tool, q.Agent != "" && r.Ag != q.Agent,
		q.Outcome != "" && r.Out != q.Outcome, q.Kind != "" && r.Kind != q.Kind,
		q.Cursor != "" && (r.T > f.curMs || r.T == f.curMs && id >= f.curID):
		return false
	}
	return true
}

// AuditAfter returns the events q selects (its value filters and time
// range; not its cursor or limit) among those written after mark, in the
// order they were written, at most limit of them; more says there were
// others, skipped. newMark is the mark of the next call. A negative mark
// returns no event and the current mark: a live tail starts with it, then
// asks again each time the log writes (audit.Log.Written). Marks are
// segment IDs, in insertion order; on a PostgreSQL store shared by
// replicas, a segment whose transaction commits after a later one's may be
// missed by a tail that read past it.
func (s *Store) AuditAfter(ctx context.Context, q AuditQuery, mark int64, limit int) (evs []AuditEvent, newMark int64, more bool, err error) {
	if mark < 0 {
		if err := s.db.QueryRowContext(ctx, qAuditMaxSeg).Scan(&newMark); err != nil {
			return nil, 0, false, fmt.Errorf("store: audit tail: %w", err)
		}
		return nil, newMark, false, nil
	}
	limit = max(limit, 1)
	q.Cursor = ""
	f := auditFilter{q: &q}
	const chunk = 64 // segments per statement
	newMark = mark
	var recs []auditRecord
	for {
		type seg struct {
			id   int64
			data string
		}
		rows, err := s.db.QueryContext(ctx, qAuditAfter, newMark, chunk)
		if err != nil {
			return evs, newMark, more, fmt.Errorf("store: audit tail: %w", err)
		}
		var segs []seg
		for rows.Next() {
			var sg seg
			if err := rows.Scan(&sg.id, &sg.data); err != nil {
				rows.Close()
				return evs, newMark, more, fmt.Errorf("store: audit tail: %w", err)
			}
			segs = append(segs, sg)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return evs, newMark, more, fmt.Errorf("store: audit tail: %w", err)
		}
		for _, sg := range segs {
			if recs, err = decodeSegment(sg.data, recs); err != nil {
				return evs, newMark, more, fmt.Errorf("store: audit tail: segment %d: %w", sg.id, err)
			}
			for i := range recs {
				id := sg.id*auditSegmentMax + int64(i)
				if !f.match(&recs[i], id) {
					continue
				}
				if len(evs) == limit {
					// Enough: the rest is skipped, up to what is written now.
					more = true
					if err := s.db.QueryRowContext(ctx, qAuditMaxSeg).Scan(&newMark); err != nil {
						return evs, sg.id, more, fmt.Errorf("store: audit tail: %w", err)
					}
					return evs, max(newMark, sg.id), more, nil
				}
				evs = append(evs, recs[i].event(id))
			}
			newMark = sg.id
		}
		if len(segs) < chunk {
			return evs, newMark, more, nil
		}
	}
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
// nothing is (its keys go with it); changed is false when the segment was
// gone already. Event IDs of the kept records change: paging cursors that
// pointed into it may skip or repeat an event of that segment.
func (s *Store) rewriteSegment(ctx context.Context, id int64, keep []auditRecord) (changed bool, err error) {
	if len(keep) == 0 {
		res, err := s.db.ExecContext(ctx, qDeleteAuditSeg, id)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return err == nil && n > 0, nil
	}
	minMs, maxMs, data, err := segmentOf(keep)
	if err != nil {
		return false, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil || !changed {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, qUpdateAuditSeg, minMs, maxMs, len(keep), string(data), id)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, nil
	}
	// The keys follow: the values left and the segment's new max_ms.
	if _, err := tx.ExecContext(ctx, qDeleteAuditKeys, id); err != nil {
		return false, err
	}
	if err := insertAuditKeys(ctx, tx, id, minMs, maxMs, keep); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

// auditKeysPerStmt bounds the rows of one key insert (7 arguments each):
// SQLite finds a $n parameter by a linear search, and a statement of a
// hundred rows cost more per row than one of five.
const auditKeysPerStmt = 5

// insertAuditKeys adds the key rows of segment seg: one per distinct
// (field, value) of its records, empty values left out, with the
// positions of the records that hold it (auditPositions).
func insertAuditKeys(ctx context.Context, tx *sql.Tx, seg, minMs, maxMs int64, recs []auditRecord) error {
	type key struct{ field, value string }
	at := make(map[key]int, 16)
	var keys []key
	var where [][]int
	for i := range recs {
		for _, f := range auditKeyFields {
			v := f.of(&recs[i])
			if v == "" {
				continue
			}
			k := key{f.field, v}
			j, ok := at[k]
			if !ok {
				j = len(keys)
				at[k] = j
				keys = append(keys, k)
				where = append(where, nil)
			}
			where[j] = append(where[j], i)
		}
	}
	var b strings.Builder
	args := make([]any, 0, 7*min(len(keys), auditKeysPerStmt))
	for start := 0; start < len(keys); start += auditKeysPerStmt {
		b.Reset()
		args = args[:0]
		b.WriteString("INSERT INTO audit_keys (seg, field, value, min_ms, max_ms, n, pos) VALUES ")
		for i := start; i < min(start+auditKeysPerStmt, len(keys)); i++ {
			if i > start {
				b.WriteString(", ")
			}
			n := len(args)
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4, n+5, n+6, n+7)
			args = append(args, seg, keys[i].field, keys[i].value, minMs, maxMs, len(recs), encodePositions(where[i], len(recs)))
		}
		b.WriteString(" ON CONFLICT DO NOTHING")
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// auditPositions: audit_keys.pos says which records of its segment (by
// index) hold the value, in the shorter of two forms: "l" and the indexes
// in decimal, dot-separated ("l3.17.250"), or "b" and a bitmap (bit i of
// byte i/8) in unpadded base64url. "" is every record. A filtered query
// intersects the positions of the values asked and reads only the
// segments where one record holds them all.

// encodePositions encodes idx (ascending indexes) of a segment of n
// records.
func encodePositions(idx []int, n int) string {
	if len(idx) == n {
		return ""
	}
	bitmapLen := 1 + base64.RawURLEncoding.EncodedLen((n+7)/8)
	list := make([]byte, 0, min(bitmapLen, 5*len(idx)+1))
	list = append(list, 'l')
	for i, p := range idx {
		if len(list) > bitmapLen {
			break
		}
		if i > 0 {
			list = append(list, '.')
		}
		list = strconv.AppendInt(list, int64(p), 10)
	}
	if len(list) <= bitmapLen {
		return string(list)
	}
	bm := make([]byte, (n+7)/8)
	for _, p := range idx {
		bm[p/8] |= 1 << (p % 8)
	}
	return "b" + base64.RawURLEncoding.EncodeToString(bm)
}

// decodePositions sets in bits (n bits, zeroed) the records pos names;
// false when pos is malformed.
func decodePositions(pos string, n int, bits []uint64) bool {
	switch {
	case pos == "":
		for i := range n {
			bits[i/64] |= 1 << (i % 64)
		}
	case pos[0] == 'l':
		for _, f := range strings.Split(pos[1:], ".") {
			p, err := strconv.Atoi(f)
			if err != nil || p < 0 || p >= n {
				return false
			}
			bits[p/64] |= 1 << (p % 64)
		}
	case pos[0] == 'b':
		bm, err := base64.RawURLEncoding.DecodeString(pos[1:])
		if err != nil || len(bm) > (n+7)/8 {
			return false
		}
		for i, c := range bm {
			bits[i/8] |= uint64(c) << (8 * (i % 8))
		}
	default:
		return false
	}
	return true
}

// intersectPositions says whether one record of a segment of n records is
// at every position list of pos (a NULL one: none is); bits and other are
// scratch space, returned for the next call. A malformed list counts as
// every record: the records are tested one by one anyway.
func intersectPositions(pos []sql.NullString, n int, bits, other []uint64) ([]uint64, []uint64, bool) {
	words := (n + 63) / 64
	if cap(bits) < words {
		bits, other = make([]uint64, words), make([]uint64, words)
	}
	bits, other = bits[:words], other[:words]
	for i := range pos {
		if !pos[i].Valid {
			return bits, other, false
		}
		dst := bits
		if i > 0 {
			dst = other
		}
		clear(dst)
		if !decodePositions(pos[i].String, n, dst) {
			decodePositions("", n, dst)
		}
		if i > 0 {
			for w := range bits {
				bits[w] &= other[w]
			}
		}
	}
	for _, w := range bits {
		if w != 0 {
			return bits, other, true
		}
	}
	return bits, other, false
}

// backfillAuditKeys is migration 13's step: the key rows of the segments
// written before it, a chunk of segments at a time (PostgreSQL runs one
// statement at a time on a transaction's connection).
func backfillAuditKeys(ctx context.Context, tx *sql.Tx) error {
	const chunk = 500
	var after int64
	var recs []auditRecord
	for {
		type seg struct {
			id, minMs, maxMs int64
			data             string
		}
		rows, err := tx.QueryContext(ctx, qAuditBackfill, after, chunk)
		if err != nil {
			return err
		}
		var segs []seg
		for rows.Next() {
			var sg seg
			if err := rows.Scan(&sg.id, &sg.minMs, &sg.maxMs, &sg.data); err != nil {
				rows.Close()
				return err
			}
			segs = append(segs, sg)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, sg := range segs {
			if recs, err = decodeSegment(sg.data, recs); err != nil {
				return fmt.Errorf("audit segment %d: %w", sg.id, err)
			}
			if err := insertAuditKeys(ctx, tx, sg.id, sg.minMs, sg.maxMs, recs); err != nil {
				return fmt.Errorf("audit segment %d: %w", sg.id, err)
			}
			after = sg.id
		}
		if len(segs) < chunk {
			return nil
		}
	}
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
