package console

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/gateway"
)

// Stats keeps the last hour of tool calls for the overview's charts, in
// one-minute buckets (a ring of 60) per series: the platform tools, each
// agent (at most MaxAgentSeries; the agents past that are one series,
// "other agents") and the calls that named no tool. Each bucket holds the
// calls, the errors and a latency histogram with fixed log-spaced bounds.
//
// Errors are the outcomes tool_error (the tool said it failed), timeout
// and error (no agent, agent unreachable, protocol error): a refused call
// (scope, unknown tool, bad arguments) and a cancelled one (the client
// went away) are the caller's doing and count as calls, not errors. The
// latency histogram leaves refused calls out: they never ran.
//
// p50 and p99 are read from the histogram: 4 bins per power of two from
// 1 µs to 2^28 µs (268 s), each read as its geometric middle, so a
// quantile is within 9.1 % (2^(1/8)) of the latency of the call at that
// rank; below 1 µs reads 1 µs, above 268 s reads 268 s.
//
// Stats is a gateway.Observer. ToolCall is on the hot path of every
// tools/call: a lock-free lookup of the series, then one short mutex
// section of that series; no allocation once the series exists.
type Stats struct {
	now func() time.Time
	// platform, none and other are fixed series; agents maps an agent's
	// name to its series, copied on write (a new agent is rare; every
	// call reads it).
	platform, none, other *series
	agents                atomic.Pointer[map[string]*series]
	mu                    sync.Mutex // serialises adding to agents
}

// MaxAgentSeries bounds the agents Stats keeps apart; calls of agents
// past it go to one series, "other agents".
const MaxAgentSeries = 200

// Series kinds (SeriesStats.Kind).
const (
	SeriesAll      = "all"      // the whole gateway, every series together
	SeriesPlatform = "platform" // the platform tools
	SeriesAgent    = "agent"    // one agent's tools
	SeriesOther    = "other"    // the agents past MaxAgentSeries
	SeriesNone     = "none"     // calls that named no tool there is
)

const statsMinutes = 60

// The latency histogram: histBounds bounds, 1 µs · 2^(k/4); bin 0 is
// below the first, bin histBounds at or above the last.
const (
	histPerOctave = 4
	histOctaves   = 28
	histBounds    = histPerOctave*histOctaves + 1
	histBins      = histBounds + 1
	histLow       = time.Microsecond
)

var histBound = func() (b [histBounds]int64) {
	for k := range b {
		b[k] = int64(math.Round(float64(histLow) * math.Exp2(float64(k)/histPerOctave)))
	}
	return b
}()

// histBin is the bin of d: the least k with d < histBound[k].
func histBin(d time.Duration) int {
	v := int64(d)
	lo, hi := 0, histBounds
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if v < histBound[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// histValue is the latency bin i reads as: its geometric middle.
func histValue(i int) time.Duration {
	switch {
	case i <= 0:
		return time.Duration(histBound[0])
	case i >= histBounds:
		return time.Duration(histBound[histBounds-1])
	}
	return time.Duration(math.Round(float64(histBound[i-1]) * math.Exp2(1.0/(2*histPerOctave))))
}

// quantile reads the latency at rank ceil(q·n) of h (0 when empty).
func quantile(h *[histBins]uint64, q float64) time.Duration {
	var n uint64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := min(max(uint64(math.Ceil(q*float64(n))), 1), n)
	var seen uint64
	for i, c := range h {
		if seen += c; seen >= rank {
			return histValue(i)
		}
	}
	return histValue(histBins - 1)
}

type bucket struct {
	minute        int64 // minutes since the Unix epoch
	used          bool
	calls, errors uint32
	hist          [histBins]uint32
}

type series struct {
	name, kind string
	mu         sync.Mutex
	b          [statsMinutes]bucket
}

func (s *series) add(minute int64, d time.Duration, isErr, timed bool) {
	bin := histBin(d)
	s.mu.Lock()
	bk := &s.b[ringIndex(minute)]
	if !bk.used || bk.minute < minute {
		*bk = bucket{minute: minute, used: true}
	} else if bk.minute > minute {
		// The clock went back past an hour: the sample is out of the
		// window.
		s.mu.Unlock()
		return
	}
	bk.calls++
	if isErr {
		bk.errors++
	}
	if timed {
		bk.hist[bin]++
	}
	s.mu.Unlock()
}

func ringIndex(minute int64) int {
	return int(((minute % statsMinutes) + statsMinutes) % statsMinutes)
}

// NewStats returns an empty Stats on the wall clock.
func NewStats() *Stats { return NewStatsClock(time.Now) }

// NewStatsClock returns an empty Stats that reads the time from now (for
// tests that fill minutes without waiting for them): the hour it shows
// ends at now(), and a call without a Start is counted at now().
func NewStatsClock(now func() time.Time) *Stats {
	s := &Stats{now: now,
		platform: &series{name: "platform", kind: SeriesPlatform},
		none:     &series{name: "no such tool", kind: SeriesNone},
		other:    &series{name: "other agents", kind: SeriesOther}}
	s.agents.Store(&map[string]*series{})
	return s
}

var _ gateway.Observer = (*Stats)(nil)

// isError says whether an outcome counts as an error (see Stats).
func isError(outcome string) bool {
	switch outcome {
	case gateway.OutcomeToolError, gateway.OutcomeTimeout, gateway.OutcomeError:
		return true
	}
	return false
}

// ToolCall implements gateway.Observer.
func (s *Stats) ToolCall(tc *gateway.ToolCall) {
	var se *series
	switch tc.Source {
	case gateway.SourcePlatform:
		se = s.platform
	case gateway.SourceAgent:
		se = s.agent(tc.Agent)
	default:
		se = s.none
	}
	// The call's end: from the call itself when it says when it started
	// (the gateway does), which spares a clock read on the hot path.
	var end int64
	if tc.Start.IsZero() {
		end = s.now().Unix()
	} else {
		end = tc.Start.Add(tc.Duration).Unix()
	}
	minute := floorDiv(end, 60)
	se.add(minute, tc.Duration, isError(tc.Outcome), tc.Outcome != gateway.OutcomeRefused)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// agent returns the series of the agent name, adding it (or "other
// agents" past MaxAgentSeries).
func (s *Stats) agent(name string) *series {
	if se := (*s.agents.Load())[name]; se != nil {
		return se
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.agents.Load()
	if se := old[name]; se != nil {
		return se
	}
	if len(old) >= MaxAgentSeries {
		return s.other
	}
	m := make(map[string]*series, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	se := &series{name: name, kind: SeriesAgent}
	m[name] = se
	s.agents.Store(&m)
	return se
}

// Refused implements gateway.Observer.
func (s *Stats) Refused(*http.Request, int, string) {}

// Request implements gateway.Observer.
func (s *Stats) Request(string, time.Duration) {}

// AgentRequest implements gateway.Observer.
func (s *Stats) AgentRequest(string, time.Duration, error) {}

// MinuteStats is one minute of a series.
type MinuteStats struct {
	Start time.Time
	// Seconds is how much of the minute has passed: 60, but for the
	// current minute.
	Seconds       float64
	Calls, Errors int
	// P50 and P99 are the latencies of the minute's calls that ran (0
	// when none did).
	P50, P99 time.Duration
}

// Rate is the minute's calls per second.
func (m MinuteStats) Rate() float64 {
	if m.Seconds <= 0 {
		return 0
	}
	return float64(m.Calls) / m.Seconds
}

// SeriesStats is the last hour of one series.
type SeriesStats struct {
	Name string // "platform", the agent's name, "other agents", "no such tool", "all tools"
	Kind string // SeriesAll, SeriesPlatform, SeriesAgent, SeriesOther, SeriesNone
	// Minutes are the last 60 minutes, oldest first; the last is the
	// current one, still running.
	Minutes []MinuteStats
	// Calls and Errors are the hour's.
	Calls, Errors int
	// Rate is the calls per second over the last 60 s (the current
	// minute and the part of the one before that is in them).
	Rate float64
	// RecentP50 and RecentP99 are the latencies over the last 5 minutes.
	RecentP50, RecentP99 time.Duration
}

// recentMinutes is the window of SeriesStats.RecentP50 and RecentP99.
const recentMinutes = 5

// Hour returns the last hour: the whole gateway (Kind SeriesAll) and
// every series with calls in it, the platform first, then the agents by
// name, then "other agents" and "no such tool".
func (s *Stats) Hour() (all SeriesStats, list []SeriesStats) {
	now := s.now()
	cur := floorDiv(now.Unix(), 60)
	into := float64(now.Unix()-cur*60) + float64(now.Nanosecond())/1e9
	var totalHist [statsMinutes][histBins]uint64
	var totalCalls, totalErrors [statsMinutes]int

	var agents []*series
	for _, se := range *s.agents.Load() {
		agents = append(agents, se)
	}
	slices.SortFunc(agents, func(a, b *series) int { return strings.Compare(a.name, b.name) })
	ordered := append(append([]*series{s.platform}, agents...), s.other, s.none)

	read := func(se *series) (SeriesStats, bool) {
		st := SeriesStats{Name: se.name, Kind: se.kind, Minutes: make([]MinuteStats, statsMinutes)}
		var hist [statsMinutes][histBins]uint64
		se.mu.Lock()
		for i := range statsMinutes {
			m := cur - statsMinutes + 1 + int64(i)
			bk := &se.b[ringIndex(m)]
			if !bk.used || bk.minute != m {
				continue
			}
			st.Minutes[i].Calls, st.Minutes[i].Errors = int(bk.calls), int(bk.errors)
			for j, c := range bk.hist {
				hist[i][j] = uint64(c)
			}
		}
		se.mu.Unlock()
		for i := range statsMinutes {
			st.Calls += st.Minutes[i].Calls
			st.Errors += st.Minutes[i].Errors
			totalCalls[i] += st.Minutes[i].Calls
			totalErrors[i] += st.Minutes[i].Errors
			for j, c := range hist[i] {
				totalHist[i][j] += c
			}
		}
		finish(&st, &hist, cur, into)
		return st, st.Calls > 0
	}
	for _, se := range ordered {
		if st, ok := read(se); ok {
			list = append(list, st)
		}
	}
	all = SeriesStats{Name: "all tools", Kind: SeriesAll, Minutes: make([]MinuteStats, statsMinutes)}
	for i := range statsMinutes {
		all.Minutes[i].Calls, all.Minutes[i].Errors = totalCalls[i], totalErrors[i]
		all.Calls += totalCalls[i]
		all.Errors += totalErrors[i]
	}
	finish(&all, &totalHist, cur, into)
	return all, list
}

// finish fills in the minutes' times, quantiles and the series' recent
// figures from the minutes' counts and histograms.
func finish(st *SeriesStats, hist *[statsMinutes][histBins]uint64, cur int64, into float64) {
	var recent [histBins]uint64
	for i := range statsMinutes {
		m := &st.Minutes[i]
		m.Start = time.Unix((cur-statsMinutes+1+int64(i))*60, 0)
		m.Seconds = 60
		if i == statsMinutes-1 {
			m.Seconds = max(into, 1)
		}
		m.P50, m.P99 = quantile(&hist[i], 0.5), quantile(&hist[i], 0.99)
		if i >= statsMinutes-recentMinutes {
			for j, c := range hist[i] {
				recent[j] += c
			}
		}
	}
	st.RecentP50, st.RecentP99 = quantile(&recent, 0.5), quantile(&recent, 0.99)
	// The last 60 s: the current minute, and the share of the previous
	// one still in them (its calls taken as spread evenly).
	prev := st.Minutes[statsMinutes-2].Calls
	st.Rate = (float64(st.Minutes[statsMinutes-1].Calls) + float64(prev)*(1-min(into, 60)/60)) / 60
}
