package console

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// The overview's charts are SVG drawn on the server: the geometry is
// computed here, as numbers and short strings, and templates/overview.html
// writes the elements through html/template (no markup is built in Go, no
// script, no chart library). Each chart has a <title> and a <desc> that
// says its last values, and the table under the charts holds the same
// figures as text.

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW      = 360
	chartH      = 190
	chartLeft   = 54 // room for the y labels
	chartRight  = 12
	chartTop    = 30 // the chart's heading
	chartBottom = 36 // the x labels and the axis title
)

// chartsView is the overview's charts and table.
type chartsView struct {
	// Enabled: the console has the call history (Options.Stats).
	Enabled bool
	// Empty: no tool call in the last hour.
	Empty bool
	// AsOf is when the figures were read.
	AsOf string
	// Groups are the whole gateway's charts, then each series'.
	Groups []chartGroup
	// Rows is the table: one row per series with calls in the hour.
	Rows []seriesRow
}

// chartGroup is the three charts of one series.
type chartGroup struct {
	ID     string // an id made of the group's index, not of its name
	Series string // "all", "platform", "agent:NAME", "other", "none"
	Label  string
	Calls  int
	Errors int
	Charts []chartView
}

// seriesRow is one line of the table under the charts.
type seriesRow struct {
	Series, Label string
	Rate          string // calls/s over the last 60 s
	Calls, Errors int    // in the hour
	P50, P99      string // over the last 5 minutes
}

// chartView is one SVG chart.
type chartView struct {
	ID      string
	Kind    string // "calls", "errors", "latency"
	Title   string
	Summary string // the text alternative: what it shows, its last values
	W, H    int
	// The plot area.
	X0, X1, Y0, Y1 float64
	YTicks         []tick
	XTicks         []tick
	YLabel, XLabel string
	Lines          []line
	Bars           []bar
	Dots           []dot
	Legend         []legendItem
	// Points is the number of minutes drawn with data.
	Points int
}

type tick struct {
	X, Y  float64
	Label string
}

type line struct {
	Class  string
	Points string // "x,y x,y ...": numbers only
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

type dot struct {
	X, Y  float64
	Class string
	Title string
}

type legendItem struct {
	X, X2, TX float64 // the sample line's ends, the label's start
	Class     string
	Label     string
}

// chartsOf builds the charts and the table from the stats' hour; nil
// stats: not enabled.
func chartsOf(s *Stats) *chartsView {
	v := &chartsView{}
	if s == nil {
		return v
	}
	v.Enabled = true
	all, list := s.Hour()
	v.AsOf = s.now().UTC().Format("15:04:05 UTC")
	if all.Calls == 0 {
		v.Empty = true
		return v
	}
	groups := append([]SeriesStats{all}, list...)
	for i, st := range groups {
		g := chartGroup{ID: "series-" + strconv.Itoa(i), Series: seriesKey(st), Label: seriesLabel(st), Calls: st.Calls, Errors: st.Errors}
		g.Charts = []chartView{callsChart(g.ID, g.Label, st), errorsChart(g.ID, g.Label, st), latencyChart(g.ID, g.Label, st)}
		v.Groups = append(v.Groups, g)
		if st.Kind == SeriesAll {
			continue
		}
		row := seriesRow{Series: g.Series, Label: g.Label, Rate: formatRate(st.Rate), Calls: st.Calls, Errors: st.Errors,
			P50: formatLatency(st.RecentP50), P99: formatLatency(st.RecentP99)}
		v.Rows = append(v.Rows, row)
	}
	return v
}

func seriesKey(st SeriesStats) string {
	if st.Kind == SeriesAgent {
		return "agent:" + st.Name
	}
	return st.Kind
}

func seriesLabel(st SeriesStats) string {
	switch st.Kind {
	case SeriesAll:
		return "All tools (the whole gateway)"
	case SeriesPlatform:
		return "Platform tools"
	case SeriesAgent:
		return "Agent " + st.Name
	case SeriesOther:
		return "Other agents (past " + strconv.Itoa(MaxAgentSeries) + ")"
	}
	return "Calls of no such tool"
}

// frame is an empty chart: its size, plot area and x axis (the hour, in
// minutes before now).
func frame(id, kind, title string) chartView {
	c := chartView{ID: id + "-" + kind, Kind: kind, Title: title, W: chartW, H: chartH,
		X0: chartLeft, X1: chartW - chartRight, Y0: chartTop, Y1: chartH - chartBottom, XLabel: "minutes ago"}
	for _, ago := range []int{60, 45, 30, 15, 0} {
		label := "−" + strconv.Itoa(ago)
		if ago == 0 {
			label = "now"
		}
		c.XTicks = append(c.XTicks, tick{X: c.minuteX(statsMinutes - ago), Label: label})
	}
	return c
}

// minuteX is the x of the left edge of minute slot i (0 the oldest; 60 the
// right end of the plot).
func (c *chartView) minuteX(i int) float64 {
	return round1(c.X0 + (c.X1-c.X0)*float64(i)/statsMinutes)
}

// midX is the middle of minute slot i.
func (c *chartView) midX(i int) float64 {
	return round1(c.X0 + (c.X1-c.X0)*(float64(i)+0.5)/statsMinutes)
}

// linearY is the y of v on a scale from 0 to top.
func (c *chartView) linearY(v, top float64) float64 {
	if top <= 0 {
		return c.Y1
	}
	return round1(c.Y1 - (c.Y1-c.Y0)*v/top)
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// niceTop is a round upper bound of maxV (1, 2 or 5 times a power of ten)
// and the step of about four ticks up to it.
func niceTop(maxV float64) (top, step float64) {
	if maxV <= 0 {
		return 1, 0.25
	}
	raw := maxV / 4
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * p; step >= raw {
			break
		}
	}
	return math.Ceil(maxV/step-1e-9) * step, step
}

func (c *chartView) linearTicks(top, step float64) {
	for v := 0.0; v <= top+step/2; v += step {
		c.YTicks = append(c.YTicks, tick{Y: c.linearY(v, top), Label: formatNumber(v)})
	}
}

func minuteTime(m MinuteStats) string { return m.Start.UTC().Format("15:04") }

// callsChart: calls per second, per minute (the current minute over its
// seconds so far).
func callsChart(id, label string, st SeriesStats) chartView {
	c := frame(id, "calls", label+": calls per second")
	c.YLabel = "Calls/s"
	var maxV float64
	for _, m := range st.Minutes {
		maxV = max(maxV, m.Rate())
	}
	top, step := niceTop(maxV)
	c.linearTicks(top, step)
	var pts []byte
	for i, m := range st.Minutes {
		x, y := c.midX(i), c.linearY(m.Rate(), top)
		pts = fmt.Appendf(pts, "%g,%g ", x, y)
		if m.Calls > 0 {
			c.Points++
			c.Dots = append(c.Dots, dot{X: x, Y: y, Class: "pt-calls",
				Title: fmt.Sprintf("%s: %s calls/s (%d calls)", minuteTime(m), formatRate(m.Rate()), m.Calls)})
		}
	}
	c.Lines = []line{{Class: "ln-calls", Points: string(pts)}}
	last := st.Minutes[len(st.Minutes)-1]
	c.Summary = fmt.Sprintf("Calls per second of %s, each minute of the last hour; now %s calls/s (%d calls this minute), %d calls in the hour.",
		label, formatRate(last.Rate()), last.Calls, st.Calls)
	return c
}

// errorsChart: errors per minute, as bars.
func errorsChart(id, label string, st SeriesStats) chartView {
	c := frame(id, "errors", label+": errors per minute")
	c.YLabel = "Errors/minute"
	var maxV float64
	for _, m := range st.Minutes {
		maxV = max(maxV, float64(m.Errors))
	}
	top, step := niceTop(max(maxV, 4))
	c.linearTicks(top, step)
	w := round1((c.X1-c.X0)/statsMinutes - 1)
	for i, m := range st.Minutes {
		if m.Errors == 0 {
			continue
		}
		c.Points++
		y := c.linearY(float64(m.Errors), top)
		c.Bars = append(c.Bars, bar{X: round1(c.minuteX(i) + 0.5), Y: y, W: w, H: round1(c.Y1 - y),
			Title: fmt.Sprintf("%s: %d errors of %d calls", minuteTime(m), m.Errors, m.Calls)})
	}
	last := st.Minutes[len(st.Minutes)-1]
	c.Summary = fmt.Sprintf("Errors per minute of %s over the last hour; %d this minute, %d in the hour (of %d calls).",
		label, last.Errors, st.Errors, st.Calls)
	if st.Errors == 0 {
		c.Summary = fmt.Sprintf("Errors per minute of %s over the last hour: none in the hour (of %d calls).", label, st.Calls)
	}
	return c
}

// latencyChart: p50 and p99 per minute, on a log scale (decades), with a
// gap where a minute had no call that ran.
func latencyChart(id, label string, st SeriesStats) chartView {
	c := frame(id, "latency", label+": latency p50 and p99")
	c.YLabel = "Latency (log scale)"
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for _, m := range st.Minutes {
		if m.P99 > 0 {
			lo, hi = min(lo, m.P50), max(hi, m.P99)
		}
	}
	if hi == 0 {
		c.Summary = "No call of " + label + " ran in the last hour: no latency to show."
		return c
	}
	// Whole decades of nanoseconds around the values.
	d0 := math.Floor(math.Log10(float64(lo)))
	d1 := math.Ceil(math.Log10(float64(hi)))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	y := func(d time.Duration) float64 {
		return round1(c.Y1 - (c.Y1-c.Y0)*(math.Log10(float64(d))-d0)/(d1-d0))
	}
	for e := d0; e <= d1; e++ {
		c.YTicks = append(c.YTicks, tick{Y: y(time.Duration(math.Pow(10, e))), Label: formatDecade(time.Duration(math.Pow(10, e)))})
	}
	for _, q := range []struct {
		class string
		of    func(MinuteStats) time.Duration
	}{{"ln-p99", func(m MinuteStats) time.Duration { return m.P99 }}, {"ln-p50", func(m MinuteStats) time.Duration { return m.P50 }}} {
		var pts []byte
		flush := func() {
			if len(pts) > 0 {
				c.Lines = append(c.Lines, line{Class: q.class, Points: string(pts)})
				pts = nil
			}
		}
		for i, m := range st.Minutes {
			if m.P99 == 0 {
				flush()
				continue
			}
			x, yy := c.midX(i), y(q.of(m))
			pts = fmt.Appendf(pts, "%g,%g ", x, yy)
			c.Dots = append(c.Dots, dot{X: x, Y: yy, Class: "pt-" + q.class[3:],
				Title: fmt.Sprintf("%s: %s %s", minuteTime(m), q.class[3:], formatLatency(q.of(m)))})
		}
		flush()
	}
	for _, m := range st.Minutes {
		if m.P99 > 0 {
			c.Points++
		}
	}
	for i, name := range []string{"p50", "p99"} {
		x := c.X1 - 110 + float64(i)*56
		c.Legend = append(c.Legend, legendItem{X: x, X2: x + 16, TX: x + 20, Class: "ln-" + name, Label: name})
	}
	var lastRan *MinuteStats
	for i := range st.Minutes {
		if st.Minutes[i].P99 > 0 {
			lastRan = &st.Minutes[i]
		}
	}
	c.Summary = fmt.Sprintf("Latency of %s per minute, log scale; last minute with calls (%s): p50 %s, p99 %s; last 5 minutes: p50 %s, p99 %s.",
		label, minuteTime(*lastRan), formatLatency(lastRan.P50), formatLatency(lastRan.P99), formatLatency(st.RecentP50), formatLatency(st.RecentP99))
	return c
}

// formatDecade is a tick label of the latency scale: a power of ten of
// nanoseconds.
func formatDecade(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + " ns"
	case d < time.Millisecond:
		return strconv.FormatInt(int64(d/time.Microsecond), 10) + " µs"
	case d < time.Second:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + " ms"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + " s"
}

// formatNumber is a tick label: short, no needless decimals.
func formatNumber(v float64) string {
	switch {
	case v >= 10000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// formatRate is a calls/s figure.
func formatRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 0.01:
		return "<0.01"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 2, 64)
	case r < 100:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

// formatLatency is a latency with its unit, three significant digits at
// most; "—" for none.
func formatLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + " ns"
	case d < time.Millisecond:
		return sig3(float64(d)/1e3) + " µs"
	case d < time.Second:
		return sig3(float64(d)/1e6) + " ms"
	}
	return sig3(d.Seconds()) + " s"
}

func sig3(f float64) string {
	switch {
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}
