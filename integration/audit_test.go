package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The audit log (issue 7): every tools/call, refusal, admin change and
// expert-agent connect/disconnect reaches the store; nothing is lost under
// load; a kill -9 loses at most the last flush interval and leaves the
// store readable; the API and the CLI filter it.

// statelessCall builds a stateless-era (2026-07-28, no session) tools/call
// of tool with the argument {"text": text}.
func statelessCall(ctx context.Context, url, token, tool, text string) (*http.Request, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"text":"` + text + `"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	return req, nil
}

// postCall POSTs one stateless-era tools/call with client and says how it
// ended: the HTTP status and whether the result has isError.
func postCall(ctx context.Context, client *http.Client, url, token, tool, text string) (int, bool, error) {
	req, err := statelessCall(ctx, url, token, tool, text)
	if err != nil {
		return 0, false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, false, err
	}
	var v struct {
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	_ = json.Unmarshal(b, &v)
	return resp.StatusCode, v.Result.IsError, nil
}

// auditAll reads every record q selects, page by page.
func auditAll(t *testing.T, st *store.Store, q store.AuditQuery) []store.AuditEvent {
	t.Helper()
	q.Limit = store.MaxAuditLimit
	var out []store.AuditEvent
	for {
		page, next, err := st.QueryAudit(testCtx(t, 10*time.Second), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		q.Cursor = next
	}
}

// waitAudit polls until q selects at least want records, and returns them.
func waitAudit(t *testing.T, st *store.Store, what string, q store.AuditQuery, want int) []store.AuditEvent {
	t.Helper()
	var got []store.AuditEvent
	poll(t, 20*time.Second, what, func() bool {
		got = auditAll(t, st, q)
		return len(got) >= want
	})
	return got
}

// TestAuditToolCalls: 10 000 tools/calls from 16 concurrent clients with
// four users, through the real gateway (platform_echo, and every 25th the
// expert agent's echo), give exactly 10 000 tool-call records: one per
// request ID, each with its caller's user and token, the tool, its source
// and outcome ok.
func TestAuditToolCalls(t *testing.T) {
	e := startGateway(t, server.Config{Audit: server.AuditConfig{FlushInterval: 100 * time.Millisecond}})
	const users, workers, total = 4, 16, 10000
	secrets := make([]string, users)
	for i := range secrets {
		secrets[i] = e.token(t, store.TokenSpec{UserID: fmt.Sprintf("user%d", i)})
	}
	toolOf := func(i int) string {
		if i%25 == 0 {
			return "echo"
		}
		return "platform_echo"
	}
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	ctx := testCtx(t, 60*time.Second)
	began := time.Now()

	var (
		mu    sync.Mutex
		fails []string
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				status, isErr, err := postCall(ctx, client, e.mcpURL(), secrets[i%users], toolOf(i), fmt.Sprint(i))
				if err != nil || status != http.StatusOK || isErr {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("call %d: status %d isError %t err %v", i, status, isErr, err))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range total {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d calls in %v", total, time.Since(began))
	if len(fails) > 0 {
		t.Fatalf("%d calls failed, first: %s", len(fails), fails[0])
	}

	l := e.srv.Audit()
	poll(t, 20*time.Second, "audit queue written", func() bool { s := l.Stats(); return s.Depth == 0 && s.Written >= total })
	if s := l.Stats(); s.Dropped != 0 || s.WriteErrors != 0 {
		t.Fatalf("audit stats %+v: want nothing dropped", s)
	}
	recs := auditAll(t, e.srv.Store(), store.AuditQuery{Kind: store.AuditToolCall})
	if len(recs) != total {
		t.Fatalf("%d tool-call records, want %d", len(recs), total)
	}
	tokenUser := map[string]string{}
	for i, s := range secrets {
		tokenUser[store.TokenIDOf(s)] = fmt.Sprintf("user%d", i)
	}
	wantSource := map[string]string{"echo": gateway.SourceAgent, "platform_echo": gateway.SourcePlatform}
	type key struct{ user, tool string }
	counts := map[key]int{}
	reqIDs := make(map[string]bool, total)
	for _, r := range recs {
		if r.RequestID == "" || reqIDs[r.RequestID] {
			t.Fatalf("record %+v: request ID empty or seen twice", r)
		}
		reqIDs[r.RequestID] = true
		if tokenUser[r.TokenID] != r.UserID || r.UserID == "" {
			t.Fatalf("record %+v: user %q does not own token %q", r, r.UserID, r.TokenID)
		}
		if r.Outcome != gateway.OutcomeOK || r.Source != wantSource[r.Tool] {
			t.Fatalf("record %+v: want outcome ok and source %q", r, wantSource[r.Tool])
		}
		counts[key{r.UserID, r.Tool}]++
	}
	want := map[key]int{}
	for i := range total {
		want[key{fmt.Sprintf("user%d", i%users), toolOf(i)}]++
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s/%s: %d records, want %d", k.user, k.tool, counts[k], n)
		}
	}
}

// TestAuditRefusalsAdminAgents: refused requests (401 with and without a
// token ID, 403 scope, 413, 429, 404 unknown session), an MQTT publish the ACL refused, admin
// changes made and refused, and the expert agent's connect and disconnect
// are recorded; the admin API and the CLI (both doors) filter them.
func TestAuditRefusalsAdminAgents(t *testing.T) {
	dataDir := t.TempDir()
	e := startGateway(t, server.Config{
		DataDir:      dataDir,
		MaxBodyBytes: 4096,
		RateLimits:   gateway.RateLimits{AgentTools: gateway.Limit{PerMinute: 1, Burst: 1}},
		Audit:        server.AuditConfig{FlushInterval: 50 * time.Millisecond},
	})
	st := e.srv.Store()
	waitAudit(t, st, "agent connect", store.AuditQuery{Kind: store.AuditAgentConnect, User: "tagent"}, 1)

	caller := e.token(t, store.TokenSpec{UserID: "carol"})
	listOnly := e.token(t, store.TokenSpec{UserID: "dave", Scopes: []string{store.ScopeToolsList}})
	revoked := e.token(t, store.TokenSpec{UserID: "erin"})
	if err := st.RevokeToken(testCtx(t, 5*time.Second), store.TokenIDOf(revoked)); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	ctx := testCtx(t, 30*time.Second)
	status := func(token, tool, text string) int {
		s, _, err := postCall(ctx, client, e.mcpURL(), token, tool, text)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name, token, tool, text string
		want                    int
	}{
		{"no token", "", "platform_echo", "x", http.StatusUnauthorized},
		{"revoked token", revoked, "platform_echo", "x", http.StatusUnauthorized},
		{"no tools:call scope", listOnly, "platform_echo", "x", http.StatusForbidden},
		{"too large", caller, "platform_echo", strings.Repeat("x", 5000), http.StatusRequestEntityTooLarge},
		{"agent call", caller, "echo", "x", http.StatusOK},
		{"agent tools limit", caller, "echo", "x", http.StatusTooManyRequests},
	} {
		if got := status(c.token, c.tool, c.text); got != c.want {
			t.Fatalf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	// A POST and a DELETE naming a session the gateway does not know.
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		req, err := http.NewRequestWithContext(ctx, method, e.mcpURL(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+caller)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Mcp-Session-Id", "no-such-session")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s with an unknown session: status %d, want 404", method, resp.StatusCode)
		}
	}
	refusals := waitAudit(t, st, "refusals", store.AuditQuery{Kind: store.AuditRefused}, 7)
	byReason := map[string][]store.AuditEvent{}
	for _, r := range refusals {
		byReason[r.Reason] = append(byReason[r.Reason], r)
		if r.Outcome != gateway.OutcomeRefused || r.RequestID == "" || r.Target != "/api/v1/mcp" {
			t.Errorf("refusal %+v: want outcome refused, a request ID and the path", r)
		}
	}
	if rs := byReason["unauthenticated"]; len(rs) != 2 {
		t.Errorf("401 records %+v, want 2", rs)
	} else if rs[0].TokenID != store.TokenIDOf(revoked) || rs[1].TokenID != "" {
		t.Errorf("401 records %+v: want the revoked token's ID (newest first), then none", rs)
	}
	if rs := byReason["forbidden"]; len(rs) != 1 || rs[0].UserID != "dave" || rs[0].Status != 403 {
		t.Errorf("403 records %+v, want one of dave", rs)
	}
	if rs := byReason["body_too_large"]; len(rs) != 1 || rs[0].Status != 413 || rs[0].UserID != "carol" {
		t.Errorf("413 records %+v, want one of carol", rs)
	}
	if rs := byReason["rate_limited"]; len(rs) != 1 || rs[0].UserID != "carol" || rs[0].Status != 429 {
		t.Errorf("429 records %+v, want one of carol", rs)
	}
	if rs := byReason["unknown_session"]; len(rs) != 2 || rs[0].UserID != "carol" || rs[0].Status != 404 || rs[1].Status != 404 {
		t.Errorf("unknown-session records %+v, want two 404s of carol", rs)
	}
	// The 429 call is also a tool-call record, refused for its rate limit.
	calls := waitAudit(t, st, "carol's calls", store.AuditQuery{Kind: store.AuditToolCall, User: "carol"}, 2)
	if calls[0].Outcome != gateway.OutcomeRefused || calls[0].Reason != "rate_limited" || calls[1].Outcome != gateway.OutcomeOK {
		t.Errorf("carol's calls %+v: want the limited one refused, the first ok", calls)
	}

	// An MQTT publish the ACL refuses.
	const clientPW = "client-password-1"
	if _, err := st.AddIdentity(testCtx(t, 5*time.Second), "dev1", acl.RoleClient, []byte(clientPW)); err != nil {
		t.Fatal(err)
	}
	mc, err := mqttClient(t, e.srv, "dev1", clientPW, "dev1-c", nil)
	if err != nil {
		t.Fatal(err)
	}
	mc.Publish("not/allowed", 0, false, "x").WaitTimeout(5 * time.Second)
	denied := waitAudit(t, st, "MQTT refusal", store.AuditQuery{Kind: store.AuditMQTTDenied, User: "dev1"}, 1)
	if d := denied[0]; d.Action != "publish" || d.Target != "not/allowed" || d.ClientID != "dev1-c" || d.Outcome != gateway.OutcomeRefused {
		t.Errorf("MQTT refusal %+v", d)
	}
	// A login the broker refuses (a wrong password): audited with why,
	// though the client hears only "bad username or password".
	if _, err := mqttClient(t, e.srv, "dev1", "not-the-password", "dev1-bad", nil); err == nil {
		t.Fatal("a wrong password logged in")
	}
	logins := waitAudit(t, st, "refused login", store.AuditQuery{Kind: store.AuditMQTTDenied, User: "dev1"}, 2)
	if l := logins[1]; l.Action != "connect" || l.Reason != "login: bad credentials" || l.ClientID != "dev1-bad" || l.Outcome != gateway.OutcomeRefused {
		t.Errorf("refused login %+v", l)
	}

	// Admin changes through the API: one made, one refused.
	adminSecret := e.token(t, store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin}})
	adm, err := admin.NewClient(e.base, adminSecret, admin.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateToken(ctx, admin.TokenRequest{User: "frank"}); err != nil {
		t.Fatal(err)
	}
	if err := adm.RevokeToken(ctx, "tb_00000000"); err == nil {
		t.Fatal("revoking an unknown token worked")
	}
	changes := waitAudit(t, st, "admin changes", store.AuditQuery{Kind: store.AuditAdmin}, 2)
	if c := changes[1]; c.Action != "token.create" || c.Target != "user frank" || c.UserID != "root" ||
		c.TokenID != store.TokenIDOf(adminSecret) || c.Outcome != gateway.OutcomeOK || c.Source != "api" {
		t.Errorf("admin change %+v: want root's token.create of frank, ok", c)
	}
	if c := changes[0]; c.Action != "token.revoke" || c.Outcome != gateway.OutcomeError || c.Reason == "" {
		t.Errorf("admin change %+v: want a failed token.revoke with its reason", c)
	}

	// The agent's disconnect.
	e.agentStop()
	if d := waitAudit(t, st, "agent disconnect", store.AuditQuery{Kind: store.AuditAgentDisconnect}, 1)[0]; d.ClientID != "tagent-1" || d.UserID != "tagent" {
		t.Errorf("agent disconnect %+v", d)
	}

	t.Run("API filters", func(t *testing.T) {
		since := time.Now().Add(-time.Minute)
		for _, c := range []struct {
			name string
			q    admin.AuditQuery
			want int
			ok   func(admin.AuditEvent) bool
		}{
			{"user", admin.AuditQuery{User: "carol"}, 6, func(e admin.AuditEvent) bool { return e.User == "carol" }},
			{"tool", admin.AuditQuery{Tool: "echo", Since: since}, 2, func(e admin.AuditEvent) bool { return e.Tool == "echo" }},
			{"outcome", admin.AuditQuery{Outcome: "refused", Kind: store.AuditRefused}, 7, func(e admin.AuditEvent) bool { return e.Status >= 400 }},
			{"until", admin.AuditQuery{Until: since}, 0, nil},
			{"page of one", admin.AuditQuery{User: "carol", Limit: 1}, 1, func(e admin.AuditEvent) bool { return e.User == "carol" }},
		} {
			page, err := adm.Audit(ctx, c.q)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if len(page.Events) != c.want {
				t.Errorf("%s: %d events, want %d: %+v", c.name, len(page.Events), c.want, page.Events)
			}
			for _, ev := range page.Events {
				if !c.ok(ev) {
					t.Errorf("%s: event %+v does not match", c.name, ev)
				}
			}
			if c.q.Limit == 1 && page.Next == "" {
				t.Errorf("%s: no next cursor", c.name)
			}
		}
		if _, err := adm.Audit(ctx, admin.AuditQuery{Cursor: "bad"}); err == nil || !strings.Contains(err.Error(), "cursor") {
			t.Errorf("bad cursor: %v, want a 400 that names the cursor", err)
		}
		user := e.token(t, store.TokenSpec{UserID: "carol"})
		if s, _ := getStatus(t, e.base+"/api/v1/admin/audit", user); s != http.StatusForbidden {
			t.Errorf("audit with a token without the admin scope: %d, want 403", s)
		}
	})

	t.Run("CLI", func(t *testing.T) {
		for _, door := range [][]string{{"--server", e.base, "--token", adminSecret}, {"--data-dir", dataDir}} {
			out, err := exec.Command(bins.toolbus, append([]string{"audit", "--user", "carol", "--tool", "echo", "--json"}, door...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("toolbus audit %v: %v\n%s", door[0], err, out)
			}
			var page admin.AuditPage
			if err := json.Unmarshal(out, &page); err != nil {
				t.Fatalf("toolbus audit %v --json: %v\n%s", door[0], err, out)
			}
			if len(page.Events) != 2 || page.Events[0].Outcome != "refused" || page.Events[1].Outcome != "ok" {
				t.Errorf("toolbus audit %v: %+v, want carol's two echo calls", door[0], page.Events)
			}
			out, err = exec.Command(bins.toolbus, append([]string{"audit", "--kind", "admin", "--since", "1h"}, door...)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "token.create user frank") || !strings.Contains(string(out), "OUTCOME") {
				t.Errorf("toolbus audit %v table: %v\n%s", door[0], err, out)
			}
		}
	})
}

func getStatus(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAuditSurvivesKill: the real `toolbus serve`, killed with SIGKILL one
// flush interval (plus a margin) after its last answered calls, keeps every
// one of those calls' records; calls in flight at the kill may be lost. The
// store opens again and the CLI reads it.
func TestAuditSurvivesKill(t *testing.T) {
	const flush = 200 * time.Millisecond
	dir := t.TempDir()
	token := cliToken(t, dir, "gina")
	g := startServeProc(t, dir, "127.0.0.1:0", "127.0.0.1:0", "--audit-flush-interval", flush.String())
	client := &http.Client{Timeout: 20 * time.Second}
	ctx := testCtx(t, 30*time.Second)
	const n = 300
	for i := range n {
		if s, isErr, err := postCall(ctx, client, g.mcpURL(), token, "platform_echo", fmt.Sprint(i)); err != nil || s != http.StatusOK || isErr {
			t.Fatalf("call %d: status %d isError %t err %v", i, s, isErr, err)
		}
	}
	answered := time.Now()
	// Calls keep coming while the process dies; theirs may be lost.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := postCall(ctx, client, g.mcpURL(), token, "platform_echo", "late"); err != nil {
				return
			}
		}
	}()
	// The documented bound is one flush interval; the margin covers a
	// batch's transaction on a busy machine.
	time.Sleep(time.Until(answered.Add(flush + time.Second)))
	if err := g.stop(t, syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("toolbus serve exited cleanly after SIGKILL")
	}
	close(stop)
	wg.Wait()

	out, err := exec.Command(bins.toolbus, "audit", "--data-dir", dir, "--kind", "tool_call", "--limit", "100000", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("toolbus audit on the killed server's data dir: %v\n%s", err, out)
	}
	var page admin.AuditPage
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("audit --json: %v\n%s", err, out)
	}
	before := 0
	for _, ev := range page.Events {
		if !ev.Time.After(answered) {
			before++
		}
	}
	if before < n {
		t.Fatalf("%d records of the %d calls answered a flush interval before the kill (%d records in all)", before, n, len(page.Events))
	}
	t.Logf("%d records in all, %d calls answered before the wait", len(page.Events), n)

	// The store opens for a new server, which writes on.
	g2 := startServeProc(t, dir, "127.0.0.1:0", "127.0.0.1:0", "--audit-flush-interval", flush.String())
	if s, _, err := postCall(ctx, client, g2.mcpURL(), token, "platform_echo", "after"); err != nil || s != http.StatusOK {
		t.Fatalf("call after restart: %d %v", s, err)
	}
	if err := g2.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	out, err = exec.Command(bins.toolbus, "audit", "--data-dir", dir, "--kind", "tool_call", "--limit", "1", "--json").CombinedOutput()
	if err != nil || json.Unmarshal(out, &page) != nil || len(page.Events) != 1 || !page.Events[0].Time.After(answered) {
		t.Fatalf("the restarted server's call not recorded: %v\n%s", err, out)
	}
}
