package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The audit page at a million records (issue 37: each page's server time
// p50 ≤ 50 ms; the live tail costs ≤ 1 % CPU per open console at 1000
// calls/s). Run:
//
//	go test -run '^$' -bench BenchmarkConsoleAudit -benchtime 200x ./console/
//
// The store is filled once per run (a minute or less) in a temporary
// directory removed at the end. TOOLBUS_AUDIT_BENCH_SEGMENT sets the
// records per flush (segment): 500 by default, what 1000 calls/s give with
// the default 500 ms flush; 1 is a quiet gateway (a record per flush), far
// slower to fill.

const benchAuditRows = 1_000_000

// benchAuditEvent is record i of the filled store: 50 tools (40 of them
// served by 10 agents), 200 users, a rare user (1 in 10 000), outcomes
// and kinds in proportions a gateway sees; one record a millisecond, the
// newest a minute ago.
func benchAuditEvent(newest time.Time, i int) store.AuditEvent {
	tool := i % 50
	e := store.AuditEvent{Time: newest.Add(-time.Duration(benchAuditRows-1-i) * time.Millisecond), Kind: store.AuditToolCall,
		TokenID: "tb_bench" + strconv.Itoa(i%200), UserID: "user-" + strconv.Itoa(i%200), Tool: fmt.Sprintf("tool-%02d", tool),
		Source: "platform", Outcome: "ok", Duration: time.Duration(200+i%5000) * time.Microsecond,
		RequestID: fmt.Sprintf("%08x-%d", i*2654435761, i%7)}
	if tool < 40 {
		e.Agent, e.Source = "agent-"+strconv.Itoa(tool%10), "agent"
	}
	if i%10000 == 7 {
		e.UserID = "rare-user"
	}
	switch r := int(uint64(i)*11400714819323198485>>40) % 1000; { // a hash of i: no pattern shared with i%50 or i%200
	case r < 20:
		e.Outcome, e.Reason = "tool_error", "the tool said no"
	case r < 30:
		e.Outcome, e.Reason = "timeout", "no answer in 30s"
	case r < 35:
		e.Outcome, e.Reason = "error", "no agent online"
	case r < 45:
		e.Kind, e.Outcome, e.Status, e.Action, e.Target, e.Tool, e.Agent = store.AuditRefused, "refused", 429, "POST", "/api/v1/mcp", "", ""
	case r < 50:
		e.Kind, e.Outcome, e.Action, e.Target, e.Tool, e.Agent, e.Source = store.AuditAdmin, "ok", "token.create", "user x", "", "", "api"
	}
	return e
}

// benchAuditStore fills a store of benchAuditRows records in a temporary
// directory and returns it.
func benchAuditStore(b *testing.B, newest time.Time) string {
	b.Helper()
	seg := 500
	if s := os.Getenv("TOOLBUS_AUDIT_BENCH_SEGMENT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 4096 {
			b.Fatalf("TOOLBUS_AUDIT_BENCH_SEGMENT=%q: want 1..4096", s)
		}
		seg = n
	}
	dir, err := os.MkdirTemp("", "toolbus-audit-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx := context.Background()
	st, err := store.Open(ctx, dir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	batch := make([]store.AuditEvent, 0, seg)
	for i := range benchAuditRows {
		batch = append(batch, benchAuditEvent(newest, i))
		if len(batch) == seg || i == benchAuditRows-1 {
			if err := st.InsertAudit(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d audit records, %d a segment, in %v", benchAuditRows, seg, time.Since(start).Round(time.Millisecond))
	return dir
}

// benchClient signs ops in on base and returns the client.
func benchClient(b *testing.B, base string) *http.Client {
	b.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(base+"/console/sign-in", url.Values{"username": {"ops"}, "password": {adminPassword}})
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		b.Fatalf("sign-in: %v %v", resp, err)
	}
	resp.Body.Close()
	return c
}

func benchGet(b *testing.B, c *http.Client, u string) string {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	return string(body)
}

var benchOlderRE = regexp.MustCompile(`<a href="([^"]*)" id="audit-older"`)

// BenchmarkConsoleAudit: the audit page's answer time (the real console
// handler of a real server, over loopback HTTP) over a million records,
// p50 per filter; then the live tail's CPU cost at 1000 records a second.
func BenchmarkConsoleAudit(b *testing.B) {
	newest := time.Now().Add(-time.Minute)
	dir := benchAuditStore(b, newest)
	cfg := server.Config{DataDir: dir}
	cfg.Audit.Retention = -1 // the records' times are what they are
	cfg.Logger = testenv.LoggerAt(b, "", logrus.ErrorLevel)
	srv := servertest.Start(b, cfg)
	ctx := context.Background()
	if _, err := srv.Store().AddUser(ctx, "ops", []byte(adminPassword)); err != nil {
		b.Fatal(err)
	}
	if err := srv.Store().SetUserAdmin(ctx, "ops", true); err != nil {
		b.Fatal(err)
	}
	base := "http://" + srv.HTTPAddr().String()
	c := benchClient(b, base)

	mid := newest.Add(-benchAuditRows / 2 * time.Millisecond).UTC()
	cases := []struct{ name, q string }{
		{"no-filter", ""},
		{"tool", "tool=tool-07"},        // 2 %
		{"user", "user=user-13"},        // 0.5 %
		{"user-rare", "user=rare-user"}, // 0.01 %: each match in its own segment
		{"agent", "agent=agent-3"},      // 8 %
		{"outcome", "outcome=timeout"},  // 1 %
		{"agent-tool-outcome", "agent=agent-3&tool=tool-13&outcome=tool_error"}, // 0.04 %
		// Values each in nearly every segment, together in few records
		// (0.005 %: under a page): the key positions skip the segments.
		{"user-outcome-kind", "user=user-13&outcome=timeout&kind=tool_call"},
		{"time-range", "since=" + mid.Add(-30*time.Second).Format("2006-01-02T15:04:05") + "&until=" + mid.Format("2006-01-02T15:04:05")},
		{"page-10", "page10"},
		{"page-10-tool", "page10 tool=tool-07"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			q := tc.q
			if rest, ok := strings.CutPrefix(q, "page10"); ok {
				// Follow Older nine times: the tenth page's URL.
				u := base + "/console/audit?" + strings.TrimSpace(rest)
				for range 9 {
					m := benchOlderRE.FindStringSubmatch(benchGet(b, c, u))
					if m == nil {
						b.Fatal("no Older link before page 10")
					}
					u = base + strings.ReplaceAll(m[1], "&amp;", "&")
				}
				q = strings.TrimPrefix(u, base+"/console/audit?")
			}
			u := base + "/console/audit?" + q
			rows := strings.Count(benchGet(b, c, u), "<tr data-id=")
			if rows == 0 {
				b.Fatalf("%s: no row", tc.name)
			}
			var took []time.Duration
			for b.Loop() {
				t0 := time.Now()
				benchGet(b, c, u)
				took = append(took, time.Since(t0))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "p90-ms")
			b.ReportMetric(float64(rows), "rows")
		})
	}

	// The live tail: CPU of this process (the gateway's audit writer and
	// console, and the stream's reader) over 5 s of 1000 records a second,
	// without a stream, then with one (filtered by a tool, and unfiltered:
	// every wake then sends its 100 rows and "more"). 30 s in all.
	// Measured once, whatever b.N.
	b.Run("tail", func(b *testing.B) {
		{
			const secs = 5
			cpu := func(stream string) float64 {
				var stop context.CancelFunc
				if stream != "" {
					sctx, cancel := context.WithCancel(ctx)
					stop = cancel
					req, _ := http.NewRequestWithContext(sctx, http.MethodGet, base+"/console/audit/events?"+stream, nil)
					resp, err := c.Do(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Fatalf("tail: %v %v", resp, err)
					}
					go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
				}
				before := cpuTime()
				tick := time.NewTicker(10 * time.Millisecond)
				end := time.Now().Add(secs * time.Second)
				i := 0
				for time.Now().Before(end) {
					<-tick.C
					for range 10 { // 1000 a second
						srv.Audit().Record(benchAuditEvent(time.Now(), i))
						i++
					}
				}
				tick.Stop()
				used := cpuTime() - before
				if stop != nil {
					stop()
				}
				return used.Seconds() / secs * 100
			}
			// Interleaved, twice: the figures are small beside the noise.
			var base0, filtered, all float64
			for range 2 {
				base0 += cpu("") / 2
				filtered += cpu("tool=tool-07") / 2
				all += cpu("after=-1") / 2
			}
			b.ReportMetric(base0, "cpu%-no-stream")
			b.ReportMetric(filtered-base0, "cpu%-tail-tool")
			b.ReportMetric(all-base0, "cpu%-tail-all")
		}
	})
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
