package console_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/gateway"
)

// clock is a test clock the Stats read.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// t0 is a minute's start, with 30 s of the minute gone.
var t0 = time.Date(2026, 3, 4, 10, 20, 0, 0, time.UTC)

func call(source, agent, outcome string, d time.Duration) *gateway.ToolCall {
	return &gateway.ToolCall{Source: source, Agent: agent, Outcome: outcome, Duration: d, Tool: "t"}
}

func seriesNamed(list []console.SeriesStats, kind, name string) *console.SeriesStats {
	for i := range list {
		if list[i].Kind == kind && list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// TestStatsMinutes: calls land in the minute of the clock, per series;
// errors are tool_error, timeout and error (not refused or cancelled);
// refused calls have no latency; an hour later a minute is gone, and the
// ring slot it used holds only the new minute.
func TestStatsMinutes(t *testing.T) {
	clk := &clock{t: t0.Add(30 * time.Second)}
	s := console.NewStatsClock(clk.now)
	for _, o := range []string{gateway.OutcomeOK, gateway.OutcomeOK, gateway.OutcomeToolError, gateway.OutcomeTimeout,
		gateway.OutcomeError, gateway.OutcomeRefused, gateway.OutcomeCancelled} {
		s.ToolCall(call(gateway.SourceAgent, "weather", o, 2*time.Millisecond))
	}
	s.ToolCall(call(gateway.SourcePlatform, "", gateway.OutcomeOK, 50*time.Microsecond))
	s.ToolCall(call("", "", gateway.OutcomeRefused, time.Microsecond))
	clk.set(t0.Add(10*time.Minute + 15*time.Second))
	s.ToolCall(call(gateway.SourceAgent, "weather", gateway.OutcomeOK, 40*time.Millisecond))
	// A call that says when it started counts in the minute it ended.
	late := call(gateway.SourceAgent, "weather", gateway.OutcomeOK, 2*time.Millisecond)
	late.Start = t0.Add(59*time.Second + 999*time.Millisecond)
	s.ToolCall(late)

	all, list := s.Hour()
	if len(list) != 3 || list[0].Kind != console.SeriesPlatform || list[1].Name != "weather" || list[2].Kind != console.SeriesNone {
		t.Fatalf("series %+v", list)
	}
	w := list[1]
	m0, m10 := w.Minutes[49], w.Minutes[59] // 10 minutes ago, now
	if !m0.Start.Equal(t0) || m0.Calls != 7 || m0.Errors != 3 || m0.Seconds != 60 || w.Minutes[50].Calls != 1 {
		t.Errorf("weather 10 min ago: %+v", m0)
	}
	if m10.Calls != 1 || m10.Errors != 0 || m10.Seconds != 15 || m10.Rate() != 1.0/15 {
		t.Errorf("weather now: %+v (rate %v)", m10, m10.Rate())
	}
	if w.Calls != 9 || w.Errors != 3 {
		t.Errorf("weather hour: %d calls %d errors", w.Calls, w.Errors)
	}
	near := func(got, want time.Duration) bool {
		return math.Abs(float64(got)/float64(want)-1) <= 0.091
	}
	if !near(m0.P50, 2*time.Millisecond) || !near(m0.P99, 2*time.Millisecond) || !near(m10.P99, 40*time.Millisecond) {
		t.Errorf("latencies: %v %v %v", m0.P50, m0.P99, m10.P99)
	}
	// Only the current minute is in the last 5.
	if !near(w.RecentP50, 40*time.Millisecond) {
		t.Errorf("recent p50 %v", w.RecentP50)
	}
	// The refused call of no tool counts, without latency.
	if n := list[2]; n.Calls != 1 || n.Minutes[49].P50 != 0 {
		t.Errorf("no-tool series %+v", n.Minutes[49])
	}
	if all.Calls != 11 || all.Errors != 3 || all.Minutes[49].Calls != 9 || !near(all.Minutes[49].P50, 2*time.Millisecond) {
		t.Errorf("all: %d calls %d errors, 10 min ago %+v", all.Calls, all.Errors, all.Minutes[49])
	}
	// Rate over the last 60 s: the current minute's call and a quarter
	// of the previous minute's (none).
	if math.Abs(w.Rate-1.0/60) > 1e-9 {
		t.Errorf("rate %v", w.Rate)
	}

	// 70 minutes after t0: the first minute left the hour; the minute
	// 60 later uses its slot and starts empty.
	clk.set(t0.Add(60*time.Minute + 5*time.Second))
	s.ToolCall(call(gateway.SourceAgent, "weather", gateway.OutcomeToolError, time.Second))
	_, list = s.Hour()
	w = *seriesNamed(list, console.SeriesAgent, "weather")
	// Now is 11:20: 10:30 is 50 minutes ago, 10:20 is out.
	if w.Calls != 3 || w.Errors != 1 || w.Minutes[59].Calls != 1 || w.Minutes[9].Calls != 1 || !w.Minutes[9].Start.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("an hour later: %d calls %d errors; now %+v; 50 min ago %+v", w.Calls, w.Errors, w.Minutes[59], w.Minutes[9])
	}
	clk.set(t0.Add(3 * time.Hour))
	if all, list := s.Hour(); all.Calls != 0 || len(list) != 0 {
		t.Errorf("three hours later: %d calls, %d series", all.Calls, len(list))
	}
}

// TestStatsQuantileBound: p50 and p99 read from the histogram are within
// 9.1 % of the true quantile, from 1 µs to 268 s.
func TestStatsQuantileBound(t *testing.T) {
	clk := &clock{t: t0}
	for d := time.Microsecond; d < 268*time.Second; d = d*13/10 + 7 {
		s := console.NewStatsClock(clk.now)
		// 98 calls at d, two at 10·d: p50 is d, p99 is 10·d.
		for i := range 100 {
			v := d
			if i >= 98 {
				v = 10 * d
			}
			s.ToolCall(call(gateway.SourcePlatform, "", gateway.OutcomeOK, v))
		}
		all, _ := s.Hour()
		m := all.Minutes[59]
		if r := float64(m.P50) / float64(d); r < 1/1.091 || r > 1.091 {
			t.Errorf("d=%v: p50 %v (%.3f)", d, m.P50, r)
		}
		if 10*d < 268*time.Second {
			if r := float64(m.P99) / float64(10*d); r < 1/1.091 || r > 1.091 {
				t.Errorf("d=%v: p99 %v (%.3f)", d, m.P99, r)
			}
		}
	}
}

// TestStatsAgentBound: past MaxAgentSeries agents, the calls of new ones
// go to one series, "other agents"; the known ones keep theirs.
func TestStatsAgentBound(t *testing.T) {
	clk := &clock{t: t0}
	s := console.NewStatsClock(clk.now)
	for i := range console.MaxAgentSeries + 10 {
		s.ToolCall(call(gateway.SourceAgent, fmt.Sprintf("a%03d", i), gateway.OutcomeOK, time.Millisecond))
	}
	s.ToolCall(call(gateway.SourceAgent, "a000", gateway.OutcomeOK, time.Millisecond))
	all, list := s.Hour()
	if len(list) != console.MaxAgentSeries+1 || all.Calls != console.MaxAgentSeries+11 {
		t.Fatalf("%d series, %d calls", len(list), all.Calls)
	}
	if o := list[len(list)-1]; o.Kind != console.SeriesOther || o.Calls != 10 {
		t.Errorf("last series %s %s with %d calls, want other agents with 10", o.Kind, o.Name, o.Calls)
	}
	if a := seriesNamed(list, console.SeriesAgent, "a000"); a == nil || a.Calls != 2 {
		t.Errorf("a000: %+v", a)
	}
}

// BenchmarkStatsToolCall: the observer's cost on the hot path of every
// tools/call, from many goroutines at once over a few agents.
func BenchmarkStatsToolCall(b *testing.B) {
	s := console.NewStats()
	calls := []*gateway.ToolCall{
		call(gateway.SourcePlatform, "", gateway.OutcomeOK, 30*time.Microsecond),
		call(gateway.SourceAgent, "weather", gateway.OutcomeOK, 3*time.Millisecond),
		call(gateway.SourceAgent, "files", gateway.OutcomeToolError, 12*time.Millisecond),
		call(gateway.SourceAgent, "search", gateway.OutcomeOK, 800*time.Millisecond),
	}
	// As the gateway reports them: with their start.
	start := time.Now()
	for _, c := range calls {
		c.Start = start
		s.ToolCall(c)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := calls[next.Add(1)%int64(len(calls))]
		for pb.Next() {
			s.ToolCall(c)
		}
	})
}

// TestStatsToolCallAllocs: no allocation per call once the series exist.
func TestStatsToolCallAllocs(t *testing.T) {
	s := console.NewStats()
	c := call(gateway.SourceAgent, "weather", gateway.OutcomeOK, 3*time.Millisecond)
	p := call(gateway.SourcePlatform, "", gateway.OutcomeOK, 3*time.Microsecond)
	s.ToolCall(c)
	if n := testing.AllocsPerRun(1000, func() { s.ToolCall(c); s.ToolCall(p) }); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

// statsConsole serves a console whose overview draws stats, over srv's
// store (an admin model without a running server: no agents listed).
func statsConsole(t *testing.T, stats *console.Stats) string {
	t.Helper()
	srv, _ := startConsole(t)
	svc, err := admin.NewService(admin.Options{Store: srv.Store()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Options{Users: srv.Store(), Admin: svc, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(c)
	t.Cleanup(hs.Close)
	return hs.URL
}

var (
	svgRE    = regexp.MustCompile(`(?s)<svg class="chart chart-(\w+)"[^>]*data-points="(\d+)">.*?</svg>`)
	groupRE  = regexp.MustCompile(`<section class="chart-group" id="series-\d+" data-series="([^"]*)"`)
	rowRE    = regexp.MustCompile(`(?s)<tr data-series="([^"]*)"><th scope="row">([^<]*)</th>(.*?)</tr>`)
	numberRE = regexp.MustCompile(`<td class="num[^"]*">([^<]*)</td>`)
)

// TestConsoleOverviewCharts: the overview draws, for the whole gateway
// and each series with calls in the hour, the calls/s, errors/min and
// latency charts (SVG with a title, a text alternative and a point per
// minute with calls), and a table of the figures; with no call in the
// hour it says so and draws nothing. An agent's name reaches the page as
// text only.
func TestConsoleOverviewCharts(t *testing.T) {
	clk := &clock{t: t0.Add(30 * time.Second)}
	stats := console.NewStatsClock(clk.now)
	base := statsConsole(t, stats)
	c := browser(t)
	signIn(t, c, base, "ops")

	resp, body := do(t, c, http.MethodGet, base+"/console/", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="calls-empty"`) || strings.Contains(body, "<svg") {
		t.Fatalf("overview without calls: %d, want the empty state and no chart\n%s", resp.StatusCode, body)
	}
	for _, id := range []string{"agents-online", "sessions-open", "broker", "version"} {
		if !strings.Contains(body, `id="`+id+`"`) {
			t.Errorf("the overview lost #%s", id)
		}
	}

	const evil = `<img src=x onerror=alert(1)>`
	// 20 minutes of calls: the platform every minute, the agent every
	// other minute with one error in each.
	for m := range 20 {
		clk.set(t0.Add(time.Duration(m)*time.Minute + 30*time.Second))
		for range 6 {
			stats.ToolCall(call(gateway.SourcePlatform, "", gateway.OutcomeOK, 100*time.Microsecond))
		}
		if m%2 == 0 {
			stats.ToolCall(call(gateway.SourceAgent, "weather", gateway.OutcomeOK, 20*time.Millisecond))
			stats.ToolCall(call(gateway.SourceAgent, "weather", gateway.OutcomeToolError, 200*time.Millisecond))
			stats.ToolCall(call(gateway.SourceAgent, evil, gateway.OutcomeOK, time.Second))
		}
	}
	resp, body = do(t, c, http.MethodGet, base+"/console/", nil, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(body, `id="calls-empty"`) {
		t.Fatalf("overview: %d\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, "<img") || !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the agent's name is not shown as text")
	}
	var groups []string
	for _, m := range groupRE.FindAllStringSubmatch(body, -1) {
		groups = append(groups, m[1])
	}
	if got := strings.Join(groups, " "); got != "all platform agent:&lt;img src=x onerror=alert(1)&gt; agent:weather" {
		t.Errorf("chart groups %q", got)
	}
	// Per group: calls (a point per minute with calls), errors (a bar
	// per minute with errors), latency (a point per minute).
	want := map[string][3]int{"all": {20, 10, 20}, "platform": {20, 0, 20}, "agent:weather": {10, 10, 10}}
	svgs := svgRE.FindAllStringSubmatch(body, -1)
	if len(svgs) != 3*len(groups) {
		t.Fatalf("%d charts for %d groups", len(svgs), len(groups))
	}
	for i, g := range groups {
		w, ok := want[g]
		if !ok {
			continue
		}
		for j, kind := range []string{"calls", "errors", "latency"} {
			m := svgs[3*i+j]
			if n, _ := strconv.Atoi(m[2]); m[1] != kind || n != w[j] {
				t.Errorf("%s: chart %s with %s points, want %s with %d", g, m[1], m[2], kind, w[j])
			}
			for _, part := range []string{"<title id=", "<desc id=", `role="img"`, `aria-labelledby=`} {
				if !strings.Contains(m[0], part) {
					t.Errorf("%s %s chart lacks %s", g, kind, part)
				}
			}
		}
	}
	// The whole gateway's charts: units on the axes, the last values in
	// the text alternative.
	all := svgs[0][0]
	for _, part := range []string{">Calls/s<", ">minutes ago<", ">now<", "now 0.20 calls/s (6 calls this minute), 150 calls in the hour"} {
		if !strings.Contains(all, part) {
			t.Errorf("the gateway's calls chart lacks %q:\n%s", part, all)
		}
	}
	// 100 µs reads 98.7 µs: the middle of its histogram bin.
	if lat := svgs[2][0]; !strings.Contains(lat, "last 5 minutes: p50 98.7 µs, p99 962 ms") || !strings.Contains(lat, ">Latency (log scale)<") || !strings.Contains(lat, ">1 s<") {
		t.Errorf("the gateway's latency chart:\n%s", lat)
	}
	if errs := svgs[3*3+1][0]; !strings.Contains(errs, "1 errors of 2 calls") || !strings.Contains(errs, "10 in the hour (of 20 calls)") {
		t.Errorf("the weather errors chart:\n%s", errs)
	}

	// The table: calls/s now (the last 60 s), the hour's calls and
	// errors, p50/p99 over the last 5 minutes.
	rows := map[string][]string{}
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		var cells []string
		for _, n := range numberRE.FindAllStringSubmatch(m[3], -1) {
			cells = append(cells, n[1])
		}
		rows[m[1]] = append([]string{m[2]}, cells...)
	}
	// Now is 19:30 into the run: the platform's 6 calls this minute and
	// half of the 6 of the minute before are in the last 60 s.
	if got := strings.Join(rows["platform"], "|"); got != "Platform tools|0.15|120|0|98.7 µs|98.7 µs" {
		t.Errorf("platform row %q", got)
	}
	// Weather's last calls were at minute 18: half of them in the last
	// 60 s (1/60 calls/s); 4 in the last 5 minutes, p50 20 ms, p99
	// 200 ms (read as 21.2 and 202 ms: within the histogram's 9.1 %).
	if got := strings.Join(rows["agent:weather"], "|"); got != "Agent weather|0.02|20|10|21.2 ms|202 ms" {
		t.Errorf("weather row %q", got)
	}
	if len(rows) != 3 {
		t.Errorf("table rows %v", rows)
	}
}

// TestConsoleOverviewNoStats: a console without Options.Stats shows the
// overview's facts and no calls section; one on a real server (which
// passes its gateway's stats) shows the empty state before any call.
func TestConsoleOverviewNoStats(t *testing.T) {
	srv, _ := startConsole(t)
	svc, err := admin.NewService(admin.Options{Store: srv.Store()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Options{Users: srv.Store(), Admin: svc})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(c)
	defer hs.Close()
	cl := browser(t)
	signIn(t, cl, hs.URL, "ops")
	resp, body := do(t, cl, http.MethodGet, hs.URL+"/console/", nil, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(body, `id="calls"`) || !strings.Contains(body, `id="agents-online"`) {
		t.Fatalf("overview without stats: %d\n%s", resp.StatusCode, body)
	}
	_, base := startConsole(t)
	cl = browser(t)
	signIn(t, cl, base, "ops")
	if resp, body := do(t, cl, http.MethodGet, base+"/console/", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="calls-empty"`) {
		t.Fatalf("overview of a server: %d, want the calls' empty state\n%s", resp.StatusCode, body)
	}
}
