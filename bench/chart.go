package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"os"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartWidth     = 1200
	chartLabelW    = 300 // scenario names
	chartBarW      = 300 // longest bar of each column
	chartColGap    = 90  // room for a bar's value label
	chartRowH      = 22
	chartTitleH    = 30
	chartReportGap = 18
)

// WriteSVG draws reports as one SVG chart: per report (a phase), its title
// and, per summary row, a bar of calls/s and a bar of p99 latency, each
// labelled with its value and its ratio to the report's baseline. Bars are
// scaled per report: only rows of one report compare by length.
func WriteSVG(w io.Writer, reports []*Report) error {
	rows := 0
	for _, rep := range reports {
		rows += len(rep.Summary)
	}
	height := 40 + len(reports)*(chartTitleH+chartRowH+chartReportGap) + rows*chartRowH
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="10" y="22" font-size="15" font-weight="bold">toolbus benchmarks: calls/s and p99 latency, ratios against each phase's baseline</text>`+"\n")
	y := 40
	x1 := chartLabelW
	x2 := chartLabelW + chartBarW + chartColGap + 60
	for _, rep := range reports {
		title := rep.Title
		if title == "" {
			title = "scenarios"
		}
		y += chartTitleH
		fmt.Fprintf(bw, `<text x="10" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", y-8, esc(title))
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#555">calls/s (x %s)</text>`+"\n", x1, y+14, esc(rep.Baseline))
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#555">p99 ms (x %s)</text>`+"\n", x2, y+14, esc(rep.Baseline))
		y += chartRowH
		var maxTP, maxP99 float64
		for _, r := range rep.Summary {
			if r.SetupError == "" {
				maxTP = max(maxTP, r.Throughput)
				maxP99 = max(maxP99, r.Latency.P99)
			}
		}
		for _, r := range rep.Summary {
			mid := y + chartRowH/2 + 4
			fmt.Fprintf(bw, `<text x="10" y="%d">%s</text>`+"\n", mid, esc(clipRunes(r.Scenario, 44)))
			if r.SetupError != "" {
				fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#b00">did not run: %s</text>`+"\n", x1, mid, esc(clipRunes(r.SetupError, 90)))
				y += chartRowH
				continue
			}
			tpRatio, p99Ratio := ratioLabels(rep, r)
			bar(bw, x1, y+3, scale(r.Throughput, maxTP), chartRowH-6, "#3b6fb6")
			fmt.Fprintf(bw, `<text x="%d" y="%d">%.0f%s</text>`+"\n", x1+scale(r.Throughput, maxTP)+5, mid, r.Throughput, tpRatio)
			bar(bw, x2, y+3, scale(r.Latency.P99, maxP99), chartRowH-6, "#d08a2c")
			fmt.Fprintf(bw, `<text x="%d" y="%d">%.2f%s</text>`+"\n", x2+scale(r.Latency.P99, maxP99)+5, mid, r.Latency.P99, p99Ratio)
			y += chartRowH
		}
		y += chartReportGap
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// ratioLabels are the " (0.82x)" suffixes of a row; the baseline row says
// "(baseline)".
func ratioLabels(rep *Report, r *Result) (string, string) {
	switch {
	case r.Ratios != nil:
		return fmt.Sprintf("  (%.2fx)", r.Ratios.Throughput), fmt.Sprintf("  (%.2fx)", r.Ratios.P99)
	case r.Scenario == rep.Baseline:
		return "  (baseline)", "  (baseline)"
	}
	return "", ""
}

func scale(v, maxV float64) int {
	if maxV <= 0 || v <= 0 {
		return 0
	}
	return max(1, int(v/maxV*chartBarW))
}

func bar(w io.Writer, x, y, width, height int, color string) {
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, y, width, height, color)
}

func esc(s string) string { return html.EscapeString(s) }

func clipRunes(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// WriteSVGFile writes the chart of reports to path.
func WriteSVGFile(path string, reports []*Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := WriteSVG(f, reports); err != nil {
		f.Close()
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	return nil
}
