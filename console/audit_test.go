package console_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// auditServer is a console whose audit writer flushes every 20 ms, with
// ops signed in.
func auditServer(t *testing.T) (*server.Server, string, *http.Client) {
	t.Helper()
	cfg := server.Config{}
	cfg.Audit.FlushInterval = 20 * time.Millisecond
	srv, base := startConsoleWith(t, cfg)
	c := browser(t)
	if resp := signIn(t, c, base, "ops"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	return srv, base, c
}

// auditCall is a tool call record at base+i ms.
func auditCall(base time.Time, i int, tool, agent, user string) store.AuditEvent {
	e := store.AuditEvent{Time: base.Add(time.Duration(i) * time.Millisecond), Kind: store.AuditToolCall, UserID: user,
		TokenID: "tb_x", Tool: tool, Source: "platform", Outcome: "ok", Duration: 1500 * time.Microsecond,
		RequestID: fmt.Sprintf("req-%s-%d", tool, i)}
	if agent != "" {
		e.Agent, e.Source = agent, "agent"
	}
	return e
}

var auditRowRE = regexp.MustCompile(`<tr data-id="(\d+)"[^>]*>(.*?)</tr>`)

// auditRows are the request IDs of a page's rows, in order.
func auditRows(body string) []string {
	var out []string
	for _, m := range auditRowRE.FindAllStringSubmatch(body, -1) {
		cells := strings.Split(m[2], "</td>")
		last := cells[len(cells)-2] // the request ID
		out = append(out, last[strings.LastIndex(last, ">")+1:])
	}
	return out
}

func hrefOf(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<a href="([^"]*)" id="` + id + `"`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

// TestConsoleAudit: the audit page lists the records newest first, each
// filter (tool, agent, user, kind, outcome, time range) narrows them, the
// Older link pages through with the cursor, and a record's text is shown
// as text.
func TestConsoleAudit(t *testing.T) {
	srv, base, c := auditServer(t)
	st := srv.Store()
	t0 := time.Date(2036, 11, 1, 10, 0, 0, 0, time.UTC) // after the console's own records
	var evs []store.AuditEvent
	for i := range 230 {
		switch i % 3 {
		case 0:
			evs = append(evs, auditCall(t0, i, "echo", "calc", "alice"))
		case 1:
			evs = append(evs, auditCall(t0, i, "sum", "calc", "bob"))
		default:
			evs = append(evs, auditCall(t0, i, "platform_ping", "", "bob"))
		}
	}
	evs[229].Outcome, evs[229].Reason = "tool_error", `<script>alert("x")</script>`
	evs = append(evs, store.AuditEvent{Time: t0.Add(time.Hour), Kind: store.AuditAdmin, UserID: "root", Action: "token.create",
		Target: "user carol", Outcome: "ok", Source: "api"})
	if err := st.InsertAudit(ctx(t), evs); err != nil {
		t.Fatal(err)
	}

	page := func(t *testing.T, q string) string {
		t.Helper()
		resp, body := do(t, c, http.MethodGet, base+"/console/audit?"+q, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET ?%s: %d\n%s", q, resp.StatusCode, body)
		}
		return body
	}

	t.Run("everything, newest first", func(t *testing.T) {
		body := page(t, "")
		rows := auditRows(body)
		if len(rows) != 100 || rows[0] != "" || rows[1] != "req-sum-229" {
			t.Fatalf("%d rows, first %q: want 100, the admin change then the newest call", len(rows), rows[:min(2, len(rows))])
		}
		for _, want := range []string{`<label for="audit-tool">`, `type="datetime-local" id="audit-since"`, `<option value="mqtt_denied">`,
			`<option value="cancelled">`, `<th scope="col">Agent</th>`, "Times are UTC", `id="audit-older"`,
			`&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`, `token.create user carol`} {
			if !strings.Contains(body, want) {
				t.Errorf("the page lacks %q", want)
			}
		}
		if strings.Contains(body, `<script>alert`) {
			t.Error("a record's reason became markup")
		}
		if strings.Contains(body, `id="audit-clear"`) {
			t.Error("a clear-filters link without filters")
		}
	})

	cases := []struct {
		q     string
		n     int
		first string
		each  string // a text every row holds
	}{
		{"tool=sum", 77, "req-sum-229", "sum"},
		{"agent=calc", 100, "req-sum-229", "calc"},
		{"agent=calc&tool=echo&user=alice", 77, "req-echo-228", "echo"},
		{"user=bob&outcome=tool_error", 1, "req-sum-229", "tool_error"},
		{"kind=admin", 1, "", "admin"},
		{"since=2036-11-01T10:00:00.100&until=2036-11-01T10:00:00.110", 10, "req-sum-109", "tool_call"},
		{"since=2036-11-01T10:30&tool=echo", 0, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.q, func(t *testing.T) {
			body := page(t, tc.q)
			rows := auditRows(body)
			if len(rows) != tc.n || tc.n > 0 && rows[0] != tc.first {
				t.Fatalf("%d rows, first %v; want %d, first %q", len(rows), rows[:min(1, len(rows))], tc.n, tc.first)
			}
			for _, m := range auditRowRE.FindAllString(body, -1) {
				if !strings.Contains(m, tc.each) {
					t.Fatalf("row without %q: %s", tc.each, m)
				}
			}
			if !strings.Contains(body, `id="audit-clear"`) {
				t.Error("no clear-filters link")
			}
			if tc.n == 0 && !strings.Contains(body, "No audit record matches these filters") {
				t.Error("no empty-state line")
			}
		})
	}
	t.Run("filters kept in the form", func(t *testing.T) {
		body := page(t, "kind=tool_call&outcome=ok&tool=echo&since=2036-11-01T10:00")
		for _, want := range []string{`<option value="tool_call" selected>`, `<option value="ok" selected>`, `id="audit-tool" name="tool" value="echo"`,
			`name="since" step="1" value="2036-11-01T10:00:00"`} {
			if !strings.Contains(body, want) {
				t.Errorf("the form lacks %q", want)
			}
		}
	})

	t.Run("older pages through the cursor", func(t *testing.T) {
		seen := map[string]bool{}
		q := "agent=calc"
		pages := 0
		for q != "" {
			body := page(t, q)
			for _, r := range auditRows(body) {
				if seen[r] {
					t.Fatalf("%s on two pages", r)
				}
				seen[r] = true
			}
			if pages > 0 && hrefOf(t, body, "audit-newest") != "/console/audit?agent=calc" {
				t.Errorf("page %d: Newest link %q", pages, hrefOf(t, body, "audit-newest"))
			}
			older := hrefOf(t, body, "audit-older")
			if older != "" && !strings.Contains(older, "agent=calc") {
				t.Fatalf("the Older link %q drops the filter", older)
			}
			q = strings.TrimPrefix(older, "/console/audit?")
			pages++
		}
		if len(seen) != 154 || pages != 2 {
			t.Fatalf("%d rows on %d pages, want 154 on 2", len(seen), pages)
		}
	})

	t.Run("bad query", func(t *testing.T) {
		for _, q := range []string{"since=yesterday", "cursor=nonsense", "since=2036-11-02T00:00&until=2036-11-01T00:00"} {
			resp, body := do(t, c, http.MethodGet, base+"/console/audit?"+q, nil, nil)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `class="message"`) || !strings.Contains(body, `id="audit-filters"`) {
				t.Errorf("?%s: %d, want 400 with the message and the form", q, resp.StatusCode)
			}
		}
	})
}

// TestConsoleAuditRefusals: no session, no page and no stream; a user
// without the admin role has none either; a cross-site form post is
// refused.
func TestConsoleAuditRefusals(t *testing.T) {
	_, base := startConsole(t)
	for _, p := range []string{"/console/audit", "/console/audit/events"} {
		if resp, body := do(t, browser(t), http.MethodGet, base+p, nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
			t.Errorf("%s without a session: %d, want the sign-in page", p, resp.StatusCode)
		}
	}
	dev := browser(t)
	if resp := signIn(t, dev, base, "dev"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("dev's sign-in: %d, want 403", resp.StatusCode)
	}
	if resp, _ := do(t, dev, http.MethodGet, base+"/console/audit", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("dev's audit page: %d, want 401 (no session)", resp.StatusCode)
	}
	ops := browser(t)
	signIn(t, ops, base, "ops")
	resp, _ := do(t, ops, http.MethodPost, base+"/console/audit", url.Values{"x": {"1"}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", resp.StatusCode)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, name, data string }

// openTail opens the live tail at u and returns its events as they come.
func openTail(t *testing.T, c *http.Client, u string) (<-chan sseEvent, func()) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("tail: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan sseEvent, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				ch <- ev
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return ch, func() { resp.Body.Close() }
}

func next(t *testing.T, ch <-chan sseEvent, what string) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("the stream ended before %s", what)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no event: %s", what)
	}
	return sseEvent{}
}

type tailRow struct {
	ID, Tool, Agent, Reason, RequestID string
}

// TestConsoleAuditTail: the live tail sends the records the filters
// select as the audit log writes them (and only those), each as JSON data;
// past its bound it says "more"; it ends when the session does.
func TestConsoleAuditTail(t *testing.T) {
	srv, base, c := auditServer(t)
	log := srv.Audit()
	now := time.Now()
	// A record written before the page: the page's mark is after it.
	log.Record(auditCall(now, 0, "echo", "calc", "alice"))
	testPollPage(t, c, base+"/console/audit?tool=echo", "req-echo-0")
	_, body := do(t, c, http.MethodGet, base+"/console/audit?tool=echo&agent=calc", nil, nil)
	m := regexp.MustCompile(`data-events="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the page has no live tail URL")
	}
	events := strings.ReplaceAll(m[1], "&amp;", "&")
	if !strings.Contains(events, "tool=echo") || !strings.Contains(events, "agent=calc") || !strings.Contains(events, "after=") {
		t.Fatalf("tail URL %q: want the filters and the page's mark", events)
	}
	ch, closeTail := openTail(t, c, base+events)
	defer closeTail()
	if ev := next(t, ch, "ready"); ev.name != "ready" || ev.id == "" {
		t.Fatalf("first event %+v, want ready with the mark", ev)
	}
	log.Record(auditCall(now, 1, "sum", "calc", "alice")) // not selected
	bad := auditCall(now, 2, "echo", "calc", "alice")
	bad.Reason = `</script><img src=x onerror=alert(1)>`
	log.Record(bad)
	ev := next(t, ch, "the echo call's row")
	var rows []tailRow
	if ev.name != "rows" || json.Unmarshal([]byte(ev.data), &rows) != nil || len(rows) != 1 || rows[0].RequestID != "req-echo-2" ||
		rows[0].Agent != "calc" || rows[0].Reason != bad.Reason || ev.id == "" {
		t.Fatalf("event %+v: want one row, the echo call of calc, its reason as data", ev)
	}
	if strings.Contains(ev.data, "<") {
		t.Errorf("the data holds a raw '<': %s", ev.data)
	}
	// A burst: no event carries more than the bound (100 rows); past it
	// comes "more" (the store's test checks the skipping itself).
	for i := range 150 {
		log.Record(auditCall(now, 10+i, "echo", "calc", "alice"))
	}
	for got := 0; got < 150; {
		ev := next(t, ch, "the burst")
		if ev.name == "more" {
			break
		}
		if err := json.Unmarshal([]byte(ev.data), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) > 100 {
			t.Fatalf("%d rows in one event, want at most 100", len(rows))
		}
		got += len(rows)
	}
	// Signing out ends the stream.
	do(t, c, http.MethodPost, base+"/console/sign-out", url.Values{}, nil)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the tail outlived the session")
		}
	}
}

// testPollPage waits until the page at u holds want (the writer's flush).
func testPollPage(t *testing.T, c *http.Client, u, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, body := do(t, c, http.MethodGet, u, nil, nil); strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %q", u, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
