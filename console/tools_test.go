package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// toolsAgent runs an expert agent named name with tools and waits until
// the gateway sees it online.
func toolsAgent(t *testing.T, srv *server.Server, name string, tools ...expertagent.Tool) {
	t.Helper()
	const pw = "agent-password-123"
	if _, err := srv.Store().AddIdentity(ctx(t), name, acl.RoleExpertAgent, []byte(pw)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: pw,
		ClientID: name + "-1", Name: name, Logger: testenv.Logger(t, "agent"),
	})
	for _, tool := range tools {
		if err := a.AddTool(tool); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Run(t, "agent "+name, a.Run)
	testenv.Poll(t, 15*time.Second, name+" online", func() bool {
		for _, s := range srv.Requester().Agents() {
			if s.Agent == name && s.Online {
				return true
			}
		}
		return false
	})
}

// toolsEcho returns its text argument; toolsSlow reports three steps of
// progress and a log line before it answers.
var (
	toolsEcho = expertagent.Tool{
		Tool: mcp.Tool{Name: "echo", Description: "Returns its text.",
			InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string","description":"what to send back"},"times":{"type":"integer"},"loud":{"type":"boolean"},"mode":{"type":"string","enum":["plain","fancy"]},"extra":{"type":"object"}},"required":["text"]}`)},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Text  string `json:"text"`
				Times int    `json:"times"`
				Loud  bool   `json:"loud"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			out := a.Text
			if a.Times > 1 {
				out = strings.Repeat(out, a.Times)
			}
			if a.Loud {
				out = strings.ToUpper(out)
			}
			return mcp.TextResult(out), nil
		},
	}
	toolsSlow = expertagent.Tool{
		Tool: mcp.Tool{Name: "slow", Description: "Works in three steps.", InputSchema: []byte(`{"type":"object","properties":{}}`)},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			for i := 1; i <= 3; i++ {
				if err := req.Progress(ctx, float64(i), 3, fmt.Sprintf("step %d", i)); err != nil {
					return nil, err
				}
				time.Sleep(50 * time.Millisecond) // the tool's own work
			}
			_ = req.Log(ctx, "info", "slow is done")
			return mcp.TextResult("slow done"), nil
		},
	}
	toolsLookup = expertagent.Tool{
		Tool: mcp.Tool{Name: "lookup", Description: "Looks things up.", InputSchema: []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`)},
		Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			return mcp.TextResult("found"), nil
		},
	}
)

// toolsGated reports progress, then waits for gate to close before it
// answers: a test sees the progress arrive while the call is still open.
func toolsGated(gate chan struct{}) expertagent.Tool {
	return expertagent.Tool{
		Tool: mcp.Tool{Name: "gated", Description: "Waits for the test.", InputSchema: []byte(`{"type":"object"}`)},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			if err := req.Progress(ctx, 1, 2, "waiting"); err != nil {
				return nil, err
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return mcp.TextResult("released"), nil
		},
	}
}

// toolsSetup is a console with agents alpha (echo, slow, gated: it waits
// for gate) and beta (lookup), and user dev granted alpha only.
func toolsSetup(t *testing.T) (*server.Server, string, *http.Client, chan struct{}) {
	t.Helper()
	srv, base := startConsole(t)
	gate := make(chan struct{})
	toolsAgent(t, srv, "alpha", toolsEcho, toolsSlow, toolsGated(gate))
	toolsAgent(t, srv, "beta", toolsLookup)
	if err := srv.Store().SetUserAgents(ctx(t), "dev", []string{"alpha"}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	if resp := signIn(t, c, base, "ops"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	return srv, base, c, gate
}

// toolsRow is the table row of tool name in table id.
func toolsRow(body, table, name string) string {
	tab := regexp.MustCompile(`(?s)<table id="` + table + `">.*?</table>`).FindString(body)
	return regexp.MustCompile(`(?s)<tr data-tool="` + regexp.QuoteMeta(name) + `".*?</tr>`).FindString(tab)
}

// TestConsoleToolsPage: as a user granted one agent, the page lists the
// platform tools and that agent's tools (with their source and a Try it
// link), and the other agent's tool as not visible, with the grant as the
// reason; as a token limited to the other agent, the reason is the
// token's agents; a read-only token's tools without readOnlyHint say that
// they are listed but not callable.
func TestConsoleToolsPage(t *testing.T) {
	srv, base, c, _ := toolsSetup(t)

	resp, body := do(t, c, http.MethodGet, base+"/console/tools?user=dev", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools page: %d\n%s", resp.StatusCode, body)
	}
	for _, tc := range []struct{ name, source string }{{"echo", "alpha"}, {"slow", "alpha"}, {"platform_whoami", "platform"}, {"platform_echo", "platform"}} {
		row := toolsRow(body, "tools-visible", tc.name)
		if !strings.Contains(row, `data-source="`+tc.source+`"`) || !strings.Contains(row, `href="/console/try?tool=`+tc.name+`&amp;user=dev"`) {
			t.Errorf("visible row of %s (source %s, Try it link):\n%s", tc.name, tc.source, row)
		}
	}
	if row := toolsRow(body, "tools-visible", "lookup"); row != "" {
		t.Errorf("dev sees beta's lookup:\n%s", row)
	}
	if row := toolsRow(body, "tools-hidden", "lookup"); !strings.Contains(row, "Agent beta is not granted to user dev (the user&#39;s grants: alpha)") {
		t.Errorf("the hidden row of lookup:\n%s", row)
	}
	if !strings.Contains(body, `id="tools-effective-agents">alpha<`) {
		t.Error("the page does not say dev may use alpha only")
	}

	// A token of ops limited to beta, read-only.
	_, tok, err := srv.Store().CreateToken(ctx(t), store.TokenSpec{UserID: "ops", Agents: []string{"beta"}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	id := tok.ID
	resp, body = do(t, c, http.MethodGet, base+"/console/tools?token="+id, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools page as a token: %d\n%s", resp.StatusCode, body)
	}
	if row := toolsRow(body, "tools-hidden", "echo"); !strings.Contains(row, "Agent alpha is outside the token&#39;s agents (beta)") {
		t.Errorf("the hidden row of echo for the token:\n%s", row)
	}
	row := toolsRow(body, "tools-visible", "lookup")
	if !strings.Contains(row, "this token is read-only") || !strings.Contains(row, `&amp;token=`+id+`"`) {
		t.Errorf("the visible row of lookup for the read-only token:\n%s", row)
	}
	if row := toolsRow(body, "tools-visible", "platform_whoami"); strings.Contains(row, "read-only") && strings.Contains(row, "tools-note") {
		t.Errorf("platform_whoami (readOnlyHint) is marked as not callable:\n%s", row)
	}
}

// toolsCall posts the Try it form and returns the answer page.
func toolsCall(t *testing.T, c *http.Client, base string, form url.Values) (*http.Response, string) {
	t.Helper()
	return do(t, c, http.MethodPost, base+"/console/try", form, nil)
}

// tryResultOf is the result block of an answer page.
var tryResultRE = regexp.MustCompile(`(?s)<div id="try-result" data-outcome="([a-z-]+)">(.*?)</div>`)

// TestConsoleTryIt: Try it calls an agent's tool with the form's values,
// a platform tool that calls the API with the caller's secret (its
// answer names the chosen user), and a tool that reports progress (the
// progress lines come before the result). Each call's token is minted
// for the chosen user, audited as the operator's (source console), and
// revoked after the call; the tool call is audited under the chosen user.
func TestConsoleTryIt(t *testing.T) {
	srv, base, c, gate := toolsSetup(t)

	resp, body := do(t, c, http.MethodGet, base+"/console/try?tool=echo&user=dev", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("try page: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{`id="try-form"`, `<input type="text" id="arg-0" name="arg:text"`, `aria-required="true"`,
		`<input type="number" step="1" id="arg-1" name="arg:times"`, `<input type="checkbox" id="arg-2" name="arg:loud"`,
		`<select id="arg-3" name="arg:mode">`, `<option value="fancy">`, `<textarea id="arg-4" name="arg:extra"`, `<label for="arg-0">text (required)`,
		`what to send back`, `name="raw"`, `<input type="hidden" name="user" value="dev">`} {
		if !strings.Contains(body, want) {
			t.Errorf("the form misses %s", want)
		}
	}

	// echo, with the form's fields.
	resp, body = toolsCall(t, c, base, url.Values{"tool": {"echo"}, "user": {"dev"}, "arg:text": {"hi<b>"}, "arg:times": {"2"}, "arg:loud": {"true"}, "arg:mode": {""}, "arg:extra": {""}})
	m := tryResultRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || m[1] != "ok" || !strings.Contains(m[2], `<pre class="try-text">HI&lt;B&gt;HI&lt;B&gt;</pre>`) {
		t.Fatalf("echo: %d %v\n%s", resp.StatusCode, m, body)
	}
	// The raw JSON wins.
	_, body = toolsCall(t, c, base, url.Values{"tool": {"echo"}, "user": {"dev"}, "arg:text": {"ignored"}, "raw": {`{"text":"raw"}`}})
	if m := tryResultRE.FindStringSubmatch(body); m == nil || !strings.Contains(m[2], `<pre class="try-text">raw</pre>`) {
		t.Fatalf("echo with raw JSON:\n%s", body)
	}

	// A platform tool that calls the API with the caller's secret.
	_, body = toolsCall(t, c, base, url.Values{"tool": {"platform_whoami"}, "user": {"dev"}})
	m = tryResultRE.FindStringSubmatch(body)
	if m == nil || m[1] != "ok" || !strings.Contains(m[2], `&#34;user&#34;: &#34;dev&#34;`) {
		t.Fatalf("platform_whoami as dev:\n%s", body)
	}

	// Progress and log lines, before the result.
	_, body = toolsCall(t, c, base, url.Values{"tool": {"slow"}, "user": {"dev"}})
	p := strings.Index(body, `<li class="try-event" data-kind="progress">Progress 1 of 3: step 1</li>`)
	l := strings.Index(body, `<li class="try-event" data-kind="log">Log <span class="mono">info</span> from alpha: <span class="try-log-data">slow is done</span></li>`)
	r := strings.Index(body, `<div id="try-result" data-outcome="ok">`)
	if p < 0 || l < 0 || r < 0 || p > r || l > r || !strings.Contains(body, "Progress 3 of 3: step 3") {
		t.Fatalf("slow: progress at %d, log at %d, result at %d\n%s", p, l, r, body)
	}

	// The page streams: the progress line arrives while the call is
	// still open (the tool waits for the test), the result after.
	toolsStreamed(t, c, base, gate)

	// Every minted token is revoked; their creation and revocation are
	// the operator's, through the console.
	toks, err := srv.Store().ListTokens(ctx(t), "dev")
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 5 {
		t.Fatalf("dev has %d tokens, want the 5 minted for the calls", len(toks))
	}
	for _, tok := range toks {
		if tok.RevokedAt.IsZero() || tok.Name != "console try-it by ops" || strings.Join(tok.Scopes, ",") != "tools:list,tools:call" || tok.ExpiresAt.IsZero() {
			t.Errorf("minted token %+v: want revoked, named, default scopes, expiring", tok)
		}
	}
	for _, action := range []string{"token.create", "token.revoke"} {
		toolsAudit(t, srv, action+" by ops", store.AuditQuery{Kind: store.AuditAdmin}, func(e store.AuditEvent) bool {
			return e.Action == action && e.UserID == "ops" && e.Source == "console"
		})
	}
	for _, tool := range []string{"echo", "platform_whoami", "slow"} {
		toolsAudit(t, srv, "tool_call "+tool+" as dev", store.AuditQuery{Kind: store.AuditToolCall}, func(e store.AuditEvent) bool {
			return e.Tool == tool && e.UserID == "dev" && e.Outcome == "ok"
		})
	}
}

// toolsStreamed calls gated and reads the answer as it comes: the
// progress line must arrive before the tool is released.
func toolsStreamed(t *testing.T, c *http.Client, base string, gate chan struct{}) {
	t.Helper()
	form := url.Values{"tool": {"gated"}, "user": {"dev"}}
	req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, base+"/console/try", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got strings.Builder
	buf := make([]byte, 4096)
	const progress = `<li class="try-event" data-kind="progress">Progress 1 of 2: waiting</li>`
	for !strings.Contains(got.String(), progress) {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("the answer ended before the progress line (%v):\n%s", err, got.String())
		}
	}
	if strings.Contains(got.String(), `id="try-result"`) {
		t.Fatal("the result came before the tool was released")
	}
	close(gate)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), `<pre class="try-text">released</pre>`) {
		t.Fatalf("after the release:\n%s", rest)
	}
}

// toolsAudit waits for an audit record of q that match selects.
func toolsAudit(t *testing.T, srv *server.Server, what string, q store.AuditQuery, match func(store.AuditEvent) bool) {
	t.Helper()
	q.Limit = store.MaxAuditLimit
	var seen []store.AuditEvent
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		evs, _, err := srv.Store().QueryAudit(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		seen = evs
		for _, e := range evs {
			if match(e) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no audit record %s among %+v", what, seen)
}

// TestConsoleToolsRefusals: no session, no page; a non-admin gets no
// session; a cross-site post is refused; a tool the caller does not see,
// an unknown token, arguments that do not fit are refused with a message
// and mint no token.
func TestConsoleToolsRefusals(t *testing.T) {
	srv, base, c, _ := toolsSetup(t)
	anon := browser(t)
	for _, p := range []string{"/console/tools?user=dev", "/console/try?tool=echo&user=dev"} {
		if resp, body := do(t, anon, http.MethodGet, base+p, nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
			t.Errorf("GET %s without a session: %d", p, resp.StatusCode)
		}
	}
	call := url.Values{"tool": {"echo"}, "user": {"dev"}, "arg:text": {"x"}}
	if resp, body := do(t, anon, http.MethodPost, base+"/console/try", call, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
		t.Errorf("POST /console/try without a session: %d", resp.StatusCode)
	}
	dev := browser(t)
	if resp := signIn(t, dev, base, "dev"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a non-admin's sign-in: %d", resp.StatusCode)
	}
	if resp, _ := do(t, dev, http.MethodPost, base+"/console/try", call, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /console/try by a non-admin: %d", resp.StatusCode)
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/try", call, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") {
		t.Errorf("cross-site POST: %d\n%s", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		msg    string
	}{
		{"a tool of an agent not granted", url.Values{"tool": {"lookup"}, "user": {"dev"}}, http.StatusNotFound, "is not among the tools user dev"},
		{"an unknown token", url.Values{"tool": {"echo"}, "token": {"tb_nothere1"}}, http.StatusNotFound, "There is no token tb_nothere1."},
		{"an integer that is not", url.Values{"tool": {"echo"}, "user": {"dev"}, "arg:text": {"x"}, "arg:times": {"two"}}, http.StatusBadRequest, "times: not an integer."},
		{"JSON that is not", url.Values{"tool": {"echo"}, "user": {"dev"}, "arg:text": {"x"}, "arg:extra": {"{"}}, http.StatusBadRequest, "extra: not valid JSON."},
		{"raw JSON not an object", url.Values{"tool": {"echo"}, "user": {"dev"}, "raw": {"[1]"}}, http.StatusBadRequest, "The raw JSON arguments are not a JSON object."},
		{"no tool", url.Values{"user": {"dev"}}, http.StatusBadRequest, "Choose a tool to call."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := toolsCall(t, c, base, tc.form)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.msg) || strings.Contains(body, `id="try-result"`) {
				t.Errorf("%d, want %d and %q\n%s", resp.StatusCode, tc.status, tc.msg, body)
			}
		})
	}
	if toks, err := srv.Store().ListTokens(ctx(t), ""); err != nil || len(toks) != 0 {
		t.Errorf("refused calls minted tokens: %+v %v", toks, err)
	}
	// The tool that is not visible also shows so on the Try it page.
	if resp, body := do(t, c, http.MethodGet, base+"/console/try?tool=lookup&user=dev", nil, nil); resp.StatusCode != http.StatusNotFound || strings.Contains(body, `id="try-form"`) {
		t.Errorf("GET try of a tool dev does not see: %d", resp.StatusCode)
	}
}

// TestConsoleTryItAsToken: as a chosen token, the call's token carries
// its scopes, read-only flag, agents and entities: a read-only token's
// call of a tool without readOnlyHint is refused by the gateway (the
// JSON-RPC error shows), an entity-narrowed token's call goes to its
// entity's endpoint and works.
func TestConsoleTryItAsToken(t *testing.T) {
	srv, base, c, _ := toolsSetup(t)
	_, ro, err := srv.Store().CreateToken(ctx(t), store.TokenSpec{UserID: "ops", Agents: []string{"beta"}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, narrow, err := srv.Store().CreateToken(ctx(t), store.TokenSpec{UserID: "dev", Entities: []store.Entity{{Type: "project", ID: "p1"}}})
	if err != nil {
		t.Fatal(err)
	}

	_, body := toolsCall(t, c, base, url.Values{"tool": {"lookup"}, "token": {ro.ID}})
	m := tryResultRE.FindStringSubmatch(body)
	if m == nil || m[1] != "error" || !strings.Contains(m[2], "a read-only token may call only tools annotated readOnlyHint") {
		t.Fatalf("lookup as the read-only token:\n%s", body)
	}
	_, body = toolsCall(t, c, base, url.Values{"tool": {"echo"}, "token": {narrow.ID}, "arg:text": {"in p1"}})
	if m := tryResultRE.FindStringSubmatch(body); m == nil || m[1] != "ok" || !strings.Contains(m[2], `<pre class="try-text">in p1</pre>`) {
		t.Fatalf("echo as the entity-narrowed token:\n%s", body)
	}
	toks, err := srv.Store().ListTokens(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	minted := 0
	for _, tok := range toks {
		if tok.Name != "console try-it by ops" {
			continue
		}
		minted++
		if tok.RevokedAt.IsZero() {
			t.Errorf("minted token %s is not revoked", tok.ID)
		}
		switch tok.UserID {
		case "ops":
			if !tok.ReadOnly || strings.Join(tok.Agents, ",") != "beta" {
				t.Errorf("the read-only token's call token: %+v", tok)
			}
		case "dev":
			if len(tok.Entities) != 1 || tok.Entities[0].String() != "project/p1" {
				t.Errorf("the narrowed token's call token: %+v", tok)
			}
		}
	}
	if minted != 2 {
		t.Errorf("%d tokens minted, want 2", minted)
	}
	toolsAudit(t, srv, "tool_call echo in project/p1", store.AuditQuery{Kind: store.AuditToolCall}, func(e store.AuditEvent) bool {
		return e.Tool == "echo" && e.UserID == "dev" && e.EntityType == "project" && e.EntityID == "p1"
	})
}
