package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/store"
)

// The audit page: the audit log newest first, filtered by the query
// string (a GET form: the filters and the cursor are not secrets), a page
// of auditPageSize rows at a time through the store's cursor, and a live
// tail (an event stream of the new records the filters select).

// auditPageSize is the rows of one page.
const auditPageSize = 100

// auditTailMax bounds the rows one wake of the live tail sends; past it
// the stream says "more" and the page is to be reloaded.
const auditTailMax = 100

// auditTimeLayouts are what the page's time fields send (datetime-local,
// with or without seconds), and RFC 3339 for a hand-made link. A time
// without a zone is UTC.
var auditTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano}

// auditTimeValue is the form's value of t (datetime-local, UTC).
const auditTimeValue = "2006-01-02T15:04:05"

// auditKinds and auditOutcomes are the form's selects: the known values.
var (
	auditKinds = []string{store.AuditToolCall, store.AuditRefused, store.AuditAdmin, store.AuditAgentConnect,
		store.AuditAgentDisconnect, store.AuditMQTTDenied, store.AuditOAuth, store.AuditConsole}
	auditOutcomes = []string{"ok", "tool_error", "timeout", "refused", "error", "cancelled"}
)

// auditFilters are the filters as the form holds them.
type auditFilters struct {
	Since, Until                          string
	Kind, Outcome, User, Agent, Tool, Cur string
}

// auditPage is the audit page's data (pageData.Page).
type auditPage struct {
	F               auditFilters
	Kinds, Outcomes []string
	Rows            []auditRow
	Filtered        bool
	Older, Newest   string // links: the next (older) page, the first page
	Live            bool   // the live tail is served
	Events          string // the live tail's URL (the same filters)
	InvalidQuery    bool
}

// auditRow is one record as the page shows it, and as the live tail
// sends it (JSON; the script puts each member in a cell as text).
type auditRow struct {
	ID        string `json:"id"`
	Time      string `json:"time"`
	Kind      string `json:"kind"`
	Outcome   string `json:"outcome"`
	User      string `json:"user"`
	Agent     string `json:"agent"`
	Tool      string `json:"tool"`
	Source    string `json:"source"`
	What      string `json:"what"`
	Status    string `json:"status"`
	Duration  string `json:"duration"`
	Reason    string `json:"reason"`
	RequestID string `json:"requestId"`
}

func newAuditRow(e admin.AuditEvent) auditRow {
	r := auditRow{ID: strconv.FormatInt(e.ID, 10), Time: e.Time.UTC().Format("2006-01-02 15:04:05.000"), Kind: e.Kind,
		Outcome: e.Outcome, User: e.User, Agent: e.Agent, Tool: e.Tool, Source: e.Source, Reason: e.Reason, RequestID: e.RequestID}
	if r.User == "" {
		r.User = e.ClientID
	}
	switch {
	case e.Action != "" && e.Target != "":
		r.What = e.Action + " " + e.Target
	default:
		r.What = e.Action + e.Target
	}
	if e.Status != 0 {
		r.Status = strconv.Itoa(e.Status)
	}
	if e.Kind == store.AuditToolCall {
		r.Duration = strconv.FormatFloat(e.DurationMs, 'f', 1, 64) + " ms"
	}
	return r
}

func (c *Console) auditRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /console/audit", c.withSession(c.auditPage))
	mux.HandleFunc("GET /console/audit/events", c.withBackground(c.auditEvents))
}

// parseAuditFilters reads the page's query string into the form's
// values and the admin model's query.
func parseAuditFilters(v url.Values) (auditFilters, admin.AuditQuery, error) {
	f := auditFilters{Since: v.Get("since"), Until: v.Get("until"), Kind: v.Get("kind"), Outcome: v.Get("outcome"),
		User: v.Get("user"), Agent: v.Get("agent"), Tool: v.Get("tool"), Cur: v.Get("cursor")}
	q := admin.AuditQuery{Kind: f.Kind, Outcome: f.Outcome, User: f.User, Agent: f.Agent, Tool: f.Tool, Cursor: f.Cur, Limit: auditPageSize}
	for _, t := range []struct {
		name string
		in   *string
		out  *time.Time
	}{{"since", &f.Since, &q.Since}, {"until", &f.Until, &q.Until}} {
		if *t.in == "" {
			continue
		}
		var err error
		for _, layout := range auditTimeLayouts {
			var tm time.Time
			if tm, err = time.ParseInLocation(layout, *t.in, time.UTC); err == nil {
				*t.out = tm
				*t.in = tm.UTC().Format(auditTimeValue)
				break
			}
		}
		if err != nil {
			return f, q, fmt.Errorf("the %q time %q is not a date and time such as 2026-11-26T10:00", t.name, *t.in)
		}
	}
	return f, q, nil
}

// values is the query string of f without its cursor.
func (f auditFilters) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"since": f.Since, "until": f.Until, "kind": f.Kind, "outcome": f.Outcome,
		"user": f.User, "agent": f.Agent, "tool": f.Tool} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, ss *session) {
	f, q, err := parseAuditFilters(r.URL.Query())
	p := &auditPage{F: f, Kinds: auditKinds, Outcomes: auditOutcomes, Live: c.opts.AuditWritten != nil}
	v := f.values()
	p.Filtered = len(v) > 0
	if f.Cur != "" {
		p.Newest = "/console/audit?" + v.Encode()
	}
	data := pageData{Title: "Audit", Nav: "audit", User: ss.user, Page: p}
	if err != nil {
		p.InvalidQuery, data.Message = true, err.Error()
		c.render(w, http.StatusBadRequest, "audit", data)
		return
	}
	ctx := adminCtx(r.Context(), ss)
	// The tail's mark is taken before the page is read: what is written
	// between comes in both, and the script keeps one row per ID.
	mark := int64(-1)
	if p.Live {
		t, err := c.opts.Admin.AuditTail(ctx, q, -1, 0)
		if err != nil {
			c.fail(w, ss, err)
			return
		}
		mark = t.Mark
	}
	page, err := c.opts.Admin.Audit(ctx, q)
	if err != nil {
		status, msg := c.actionError(err)
		p.InvalidQuery, data.Message = true, msg
		c.render(w, status, "audit", data)
		return
	}
	for _, e := range page.Events {
		p.Rows = append(p.Rows, newAuditRow(e))
	}
	if page.Next != "" {
		older := f.values()
		older.Set("cursor", page.Next)
		p.Older = "/console/audit?" + older.Encode()
	}
	if p.Live {
		ev := f.values()
		ev.Set("after", strconv.FormatInt(mark, 10))
		p.Events = "/console/audit/events?" + ev.Encode()
	}
	c.render(w, http.StatusOK, "audit", data)
}

// auditEvents is the live tail: server-sent events of the records the
// filters select as the audit log writes them. It wakes at each write
// (Options.AuditWritten), never on a timer, and reads what was written
// after its mark: "rows" (a JSON array of auditRow, oldest first, at most
// auditTailMax; the event's id is the mark, so a reconnecting EventSource
// goes on from there through Last-Event-ID) and "more" when records past
// that bound were skipped. Records reach it, as the page, once the writer
// flushed them (serve --audit-flush-interval). Like the agents' stream it
// ends with the session and with EndStreams.
func (c *Console) auditEvents(w http.ResponseWriter, r *http.Request, ss *session) {
	if c.opts.AuditWritten == nil {
		http.Error(w, "this server has no audit log to follow", http.StatusNotFound)
		return
	}
	_, q, err := parseAuditFilters(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q.Cursor, q.Limit = "", 0
	mark := int64(-1)
	for _, s := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			mark = n
			break
		}
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx := adminCtx(r.Context(), ss)
	// Armed before the first read: a write while it runs wakes the loop.
	written := c.opts.AuditWritten()
	if mark < 0 {
		t, err := c.opts.Admin.AuditTail(ctx, q, -1, 0)
		if err != nil {
			c.log.WithError(err).Error("audit tail")
			http.Error(w, "the audit log cannot be read now", http.StatusServiceUnavailable)
			return
		}
		mark = t.Mark
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "id: %d\nevent: ready\ndata: ok\n\n", mark)
	fl.Flush()
	// send reads what was written after mark and sends it; false when the
	// stream is to end.
	send := func() bool {
		t, err := c.opts.Admin.AuditTail(ctx, q, mark, auditTailMax)
		if err != nil {
			if !errors.Is(err, r.Context().Err()) {
				c.log.WithError(err).Error("audit tail")
			}
			return false
		}
		if t.Mark == mark && len(t.Events) == 0 {
			return true
		}
		mark = t.Mark
		rows := make([]auditRow, len(t.Events))
		for i, e := range t.Events {
			rows[i] = newAuditRow(e)
		}
		// encoding/json writes no newline, and escapes <, > and & too.
		data, err := json.Marshal(rows)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: rows\ndata: %s\n\n", mark, data); err != nil {
			return false
		}
		if t.More {
			fmt.Fprintf(w, "event: more\ndata: %d\n\n", auditTailMax)
		}
		fl.Flush()
		return true
	}
	// What was written between the mark and now (the page's load and the
	// Live switch, or a reconnection) comes first.
	if !send() {
		return
	}
	c.follow(r, ss, written, c.opts.AuditWritten, send)
}
