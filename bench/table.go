package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the report as a table: one row per scenario, ratios
// against the baseline, CPU per call of the server and of the generator, and
// the generator's share of the CPU (a share near 50 % on a 2-core machine
// means the generator, not the server, is what limits the throughput).
func (rep *Report) WriteTable(w io.Writer) error {
	if rep.Title != "" {
		if _, err := fmt.Fprintf(w, "== %s\n", rep.Title); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tmode\tversion\tcalls/s\tx %s\tx per round\tp50 ms\tp90 ms\tp99 ms\tmax ms\tp50 x\tp99 x\terrors\tsrv cpu us/call\tgen cpu us/call\tgen cpu share\tsrv peak MiB\tgen peak MiB\tother cpu s\t\n", rep.Baseline)
	for _, r := range rep.Summary {
		if r.SetupError != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\tdid not run: %s\t\n", r.Scenario, r.Mode, r.ProtocolVersion, oneLine(r.SetupError, 100))
			continue
		}
		ratio, p50Ratio, p99Ratio := "-", "-", "-"
		if r.Ratios != nil {
			ratio = fmt.Sprintf("%.2f", r.Ratios.Throughput)
			p50Ratio = fmt.Sprintf("%.2f", r.Ratios.P50)
			p99Ratio = fmt.Sprintf("%.2f", r.Ratios.P99)
		} else if r.Scenario == rep.Baseline {
			ratio, p50Ratio, p99Ratio = "1.00", "1.00", "1.00"
		}
		srvCPU, share, srvRSS := "-", "-", "-"
		if r.Server != nil {
			if r.OK > 0 {
				srvCPU = fmt.Sprintf("%.1f", r.ServerCPUPerCallMicros)
			}
			share = fmt.Sprintf("%.0f%%", 100*r.GeneratorCPUShare)
			srvRSS = mib(r.Server.PeakRSSBytes)
		}
		genCPU, genRSS := "-", "-"
		if r.Generator != nil {
			if r.OK > 0 {
				genCPU = fmt.Sprintf("%.1f", r.GeneratorCPUPerCallMicros)
			}
			genRSS = mib(r.Generator.PeakRSSBytes)
		}
		perRound := "-"
		if s := r.RoundRatios; s != nil {
			perRound = fmt.Sprintf("%.2f [%.2f-%.2f]", s.Median, s.Min, s.Max)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n",
			r.Scenario, r.Mode, r.ProtocolVersion, r.Throughput, ratio, perRound,
			r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max, p50Ratio, p99Ratio,
			r.Errors, srvCPU, genCPU, share, srvRSS, genRSS, r.OtherCPUSeconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Rounds > 1 {
		if _, err := fmt.Fprintf(w, "each row: the median-throughput round of %d (every round is in the JSON report); x per round: median [min-max] of each round's ratio against the baseline of the same round\n", rep.Rounds); err != nil {
			return err
		}
	}
	for _, c := range rep.Comparisons {
		if err := writeComparison(w, c); err != nil {
			return err
		}
	}
	for _, r := range rep.Summary {
		if c := r.ColdCycle; c != nil {
			if _, err := fmt.Fprintf(w, "%s: whole cold cycle (initialize, initialized, call, DELETE) p50 %.2f ms, p99 %.2f ms\n", r.Scenario, c.P50, c.P99); err != nil {
				return err
			}
		}
		if m := r.Memory; m != nil {
			if _, err := fmt.Fprintf(w, "%s: %d contexts; server RSS %s -> %s MiB, %.0f bytes per context (VmRSS, uncollected garbage included)\n",
				r.Scenario, m.Contexts, mib(m.RSSBeforeBytes), mib(m.RSSAfterBytes), m.BytesPerContext); err != nil {
				return err
			}
		}
	}
	for _, n := range rep.Notes {
		if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
			return err
		}
	}
	for _, r := range rep.Results {
		for _, s := range r.ErrorSamples {
			if _, err := fmt.Fprintf(w, "%s error: %s\n", r.Scenario, oneLine(s, 300)); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeComparison(w io.Writer, c Comparison) error {
	if c.Throughput == nil {
		_, err := fmt.Fprintf(w, "%s vs %s: no round measured both\n", c.Scenario, c.Against)
		return err
	}
	t := c.Throughput
	line := fmt.Sprintf("%s vs %s: calls/s x%.2f per round, median of %d [%.2f-%.2f]", c.Scenario, c.Against, t.Median, t.N, t.Min, t.Max)
	if p := c.P99; p != nil {
		line += fmt.Sprintf("; p99 x%.2f [%.2f-%.2f]", p.Median, p.Min, p.Max)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

func mib(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/(1<<20))
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
