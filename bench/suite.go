package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
)

// Scenario is one measurement of a suite: a baseline the suite starts, or an
// external endpoint.
type Scenario struct {
	// Name labels the result; "" means Baseline, or "target:<Tool>".
	Name string
	// Baseline is the baseline server to start (one of BaselineNames); ""
	// for an external endpoint at URL.
	Baseline string
	// URL of an external endpoint (when Baseline is "").
	URL string
	// PIDs of the external endpoint's processes, for their CPU time and
	// peak RSS; empty means unknown.
	PIDs []int
	// Token, Tool, Arguments and ProtocolVersion override the suite's load
	// options when set; an empty ProtocolVersion on a baseline means
	// DefaultProtocolVersion(Baseline).
	Token           string
	Tool            string
	Arguments       json.RawMessage
	ProtocolVersion string
	// Cold and Contexts set LoadOptions.Cold and LoadOptions.Contexts for
	// this scenario alone.
	Cold     bool
	Contexts int
	// MQTTFloor, when set, makes this a raw MQTT request/response scenario
	// (RunMQTTFloor) instead of an HTTP one; its Load is taken from the
	// suite's, with PIDs as the server processes. Name defaults to
	// MQTTFloorScenario.
	MQTTFloor *MQTTFloorOptions
}

func (s Scenario) name() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Baseline != "":
		return s.Baseline
	case s.MQTTFloor != nil:
		return MQTTFloorScenario
	}
	tool := s.Tool
	if tool == "" {
		tool = EchoTool
	}
	return "target:" + tool
}

// ParseScenarios reads a comma-separated scenario list: baseline names,
// "baselines" (all of them) and "target" (the external endpoint, filled in
// by the caller), each optionally suffixed "@<protocol version>".
func ParseScenarios(list string) ([]Scenario, error) {
	var out []Scenario
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, version, _ := strings.Cut(item, "@")
		switch name {
		case "baselines":
			for _, b := range BaselineNames() {
				out = append(out, Scenario{Baseline: b, ProtocolVersion: version})
			}
		case "target":
			out = append(out, Scenario{ProtocolVersion: version})
		default:
			if _, err := NewBaseline(name, ServerOptions{}); err != nil {
				return nil, fmt.Errorf("scenario %q: %w", item, err)
			}
			out = append(out, Scenario{Baseline: name, ProtocolVersion: version})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bench: no scenario")
	}
	return out, nil
}

// SuiteOptions configure a suite run.
type SuiteOptions struct {
	Scenarios []Scenario
	// Load is the template of every scenario's load run (URL, Tool, Token,
	// ProtocolVersion and ServerPIDs are set per scenario).
	Load LoadOptions
	// Child, when its Command is set, runs each baseline in a child
	// process (the default of cmd/toolbus-bench), so that the server's and
	// the generator's CPU time and peak RSS are measured apart. Otherwise
	// baselines run in this process.
	Child ChildOptions
	// Baseline is the scenario name the ratios are computed against; ""
	// means BaselineMCPGo (the issues state their targets against it).
	Baseline string
	// Title and Notes are copied into the Report.
	Title string
	Notes []string
	// Compare names pairs of scenarios whose ratio the report gives round
	// by round, beside the ratios against Baseline (Report.Comparisons):
	// a target stated against another scenario than the baseline.
	Compare []Pair
	// Rounds runs the whole scenario list this many times, interleaved, so
	// that load from other processes spreads over every scenario instead
	// of landing on one; the summary takes each scenario's median round.
	// 0 means 1.
	Rounds int
	// Pause between scenarios, so that one's TIME_WAIT sockets and GC do not
	// land in the next; 0 means none.
	Pause time.Duration
	// Logger receives progress; nil means discard.
	Logger *logrus.Entry
}

// Report is the outcome of a suite: every result in run order, the summary
// (one per scenario), and the machine they were measured on.
type Report struct {
	// Title says what the report measured (a phase of scripts/bench.sh);
	// Notes explain how, one sentence each. Both are printed with the table.
	Title    string    `json:"title,omitempty"`
	Notes    []string  `json:"notes,omitempty"`
	Started  time.Time `json:"started"`
	Baseline string    `json:"baseline"`
	Rounds   int       `json:"rounds"`
	Machine  Machine   `json:"machine"`
	// Summary holds, per scenario in run order, its median-throughput
	// round, with ratios against the baseline's summary entry.
	Summary []*Result `json:"summary"`
	// Comparisons holds the ratios SuiteOptions.Compare asked for.
	Comparisons []Comparison `json:"comparisons,omitempty"`
	// Results holds every round of every scenario, with ratios against the
	// baseline of the same round.
	Results []*Result `json:"results"`
}

// ErrUnknownScenario is returned by RunSuite for a Compare pair naming a
// scenario the suite does not run, or one that several share.
var ErrUnknownScenario = errors.New("bench: unknown scenario")

// Pair names two scenarios: Scenario is compared with Against.
type Pair struct {
	Scenario string `json:"scenario"`
	Against  string `json:"against"`
}

// ParsePair reads "A vs B" (scenario names hold ":" and "/", not " vs ").
func ParsePair(s string) (Pair, error) {
	a, b, ok := strings.Cut(s, " vs ")
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if !ok || a == "" || b == "" || a == b {
		return Pair{}, fmt.Errorf("bench: %q is not \"<scenario> vs <other scenario>\"", s)
	}
	return Pair{Scenario: a, Against: b}, nil
}

// Comparison is one Pair's ratios, from the rounds that measured both
// without a setup error: the spread of each round's throughput ratio (> 1:
// Scenario is faster), and of its p99 ratio (> 1: Scenario has the slower
// tail) when both ran paced (LoadOptions.Rate): saturated latencies do not
// compare.
type Comparison struct {
	Pair
	Throughput *Spread `json:"throughput,omitempty"`
	P99        *Spread `json:"p99,omitempty"`
}

// compare computes a Comparison per pair from rep.Results.
func (rep *Report) compare(pairs []Pair) {
	rep.Comparisons = rep.Comparisons[:0]
	for _, p := range pairs {
		byRound := map[int][2]*Result{}
		for _, r := range rep.Results {
			if r.SetupError != "" || r.Throughput <= 0 {
				continue
			}
			e := byRound[r.Round]
			switch r.Scenario {
			case p.Scenario:
				e[0] = r
			case p.Against:
				e[1] = r
			}
			byRound[r.Round] = e
		}
		var tp, p99 []float64
		for _, e := range byRound {
			if e[0] == nil || e[1] == nil {
				continue
			}
			tp = append(tp, e[0].Throughput/e[1].Throughput)
			if e[0].Rate > 0 && e[1].Rate > 0 && e[0].Latency.P99 > 0 && e[1].Latency.P99 > 0 {
				p99 = append(p99, e[0].Latency.P99/e[1].Latency.P99)
			}
		}
		rep.Comparisons = append(rep.Comparisons, Comparison{Pair: p, Throughput: spreadOf(tp), P99: spreadOf(p99)})
	}
}

// Machine describes where a report was measured.
type Machine struct {
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Hostname   string `json:"hostname,omitempty"`
}

// RunSuite measures every scenario one after another. A scenario that fails
// to start is reported with SetupError and the suite goes on; the error
// returned is ctx's, or ErrUnknownScenario for a Compare pair that names no
// scenario of the suite, or more than one (then nothing runs).
func RunSuite(ctx context.Context, opts SuiteOptions) (*Report, error) {
	names := map[string]int{}
	for _, sc := range opts.Scenarios {
		names[sc.name()]++
	}
	for _, p := range opts.Compare {
		for _, n := range []string{p.Scenario, p.Against} {
			if names[n] != 1 {
				return nil, fmt.Errorf("%w: %q names %d scenarios (compare %q vs %q)", ErrUnknownScenario, n, names[n], p.Scenario, p.Against)
			}
		}
	}
	log := logutil.Component(opts.Logger, "bench-suite")
	if opts.Baseline == "" {
		opts.Baseline = BaselineMCPGo
	}
	host, _ := os.Hostname()
	rep := &Report{
		Title:    opts.Title,
		Notes:    opts.Notes,
		Started:  time.Now().UTC(),
		Baseline: opts.Baseline,
		Machine: Machine{
			GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Hostname: host,
		},
	}
	rounds := max(opts.Rounds, 1)
	rep.Rounds = rounds
	defer func() {
		rep.summarize()
		rep.compare(opts.Compare)
	}()
	n := 0
	for round := 1; round <= rounds; round++ {
		for _, sc := range opts.Scenarios {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			if n > 0 && opts.Pause > 0 {
				select {
				case <-ctx.Done():
					return rep, ctx.Err()
				case <-time.After(opts.Pause):
				}
			}
			n++
			log.WithFields(logrus.Fields{"scenario": sc.name(), "round": round}).Info("measuring")
			r := runScenario(ctx, sc, opts, log)
			r.Round = round
			fields := logrus.Fields{"scenario": r.Scenario, "round": round, "calls_per_second": int(r.Throughput),
				"errors": r.Errors, "p50_ms": r.Latency.P50, "other_cpu_seconds": r.OtherCPUSeconds}
			if r.SetupError != "" {
				log.WithFields(fields).WithField("error", r.SetupError).Warn("scenario did not run")
			} else {
				log.WithFields(fields).Info("measured")
			}
			rep.Results = append(rep.Results, r)
		}
	}
	return rep, ctx.Err()
}

func runScenario(ctx context.Context, sc Scenario, opts SuiteOptions, log *logrus.Entry) *Result {
	lo := opts.Load
	lo.Logger = log
	if sc.Token != "" {
		lo.Token = sc.Token
	}
	if sc.Tool != "" {
		lo.Tool = sc.Tool
	}
	if sc.Arguments != nil {
		lo.Arguments = sc.Arguments
	}
	if sc.Cold {
		lo.Cold = true
	}
	if sc.Contexts > 0 {
		lo.Contexts = sc.Contexts
	}
	if sc.ProtocolVersion != "" {
		lo.ProtocolVersion = sc.ProtocolVersion
	} else if sc.Baseline != "" && lo.ProtocolVersion == "" {
		lo.ProtocolVersion = DefaultProtocolVersion(sc.Baseline)
	}
	mode := "external"
	lo.URL, lo.ServerPIDs = sc.URL, sc.PIDs
	failed := func(err error) *Result {
		r := &Result{Scenario: sc.name(), Mode: mode, URL: lo.URL, SetupError: err.Error()}
		return r
	}
	switch {
	case sc.MQTTFloor != nil:
		fo := *sc.MQTTFloor
		lo.ServerPIDs = sc.PIDs
		fo.Load = lo
		r, err := RunMQTTFloor(ctx, fo)
		if r == nil {
			if err == nil {
				err = errors.New("bench: no result")
			}
			r = &Result{Mode: mode, URL: fo.BrokerURL, SetupError: err.Error()}
		}
		r.Scenario = sc.name()
		return r
	case sc.Baseline != "" && len(opts.Child.Command) > 0:
		mode = "child-process"
		child, err := StartChild(ctx, sc.Baseline, opts.Child)
		if err != nil {
			return failed(err)
		}
		defer func() {
			if err := child.Close(); err != nil {
				log.WithError(err).WithField("scenario", sc.name()).Warn("child server did not stop cleanly")
			}
		}()
		lo.URL, lo.ServerPIDs = child.URL(), []int{child.PID()}
	case sc.Baseline != "":
		mode = "in-process"
		srv, err := NewBaseline(sc.Baseline, ServerOptions{Logger: opts.Logger})
		if err != nil {
			return failed(err)
		}
		if err := srv.Start(ctx); err != nil {
			return failed(err)
		}
		defer srv.Close()
		lo.URL, lo.ServerPIDs = srv.URL(), nil
	case sc.URL == "":
		return failed(errors.New("bench: target scenario without a URL"))
	}
	r, err := Run(ctx, lo)
	if r == nil {
		if err == nil {
			err = errors.New("bench: no result")
		}
		return failed(err)
	}
	r.Scenario, r.Mode = sc.name(), mode
	return r
}

// summarize computes each result's ratios against the baseline of its
// round, and the Summary: per scenario, the round with the median throughput
// (the lower median for an even count), with ratios against the baseline's
// summary entry and the spread of its rounds' ratios.
func (rep *Report) summarize() {
	baseOf := map[int]*Result{}
	for _, r := range rep.Results {
		if r.Scenario == rep.Baseline && r.SetupError == "" && baseOf[r.Round] == nil {
			baseOf[r.Round] = r
		}
	}
	for _, r := range rep.Results {
		r.ratiosAgainst(baseOf[r.Round])
	}
	var order []string
	byName := map[string][]*Result{}
	for _, r := range rep.Results {
		if byName[r.Scenario] == nil {
			order = append(order, r.Scenario)
		}
		byName[r.Scenario] = append(byName[r.Scenario], r)
	}
	rep.Summary = rep.Summary[:0]
	var base *Result
	for _, name := range order {
		rs := slices.Clone(byName[name])
		var perRound []float64
		for _, r := range rs {
			if r.Ratios != nil {
				perRound = append(perRound, r.Ratios.Throughput)
			}
		}
		slices.SortStableFunc(rs, func(a, b *Result) int { return cmp.Compare(a.Throughput, b.Throughput) })
		m := *rs[(len(rs)-1)/2]
		m.Ratios = nil
		if len(perRound) > 1 {
			m.RoundRatios = spreadOf(perRound)
		}
		rep.Summary = append(rep.Summary, &m)
		if name == rep.Baseline && m.SetupError == "" {
			base = &m
		}
	}
	for _, r := range rep.Summary {
		r.ratiosAgainst(base)
	}
}

// Failed reports whether any scenario did not run or had failed calls.
func (rep *Report) Failed() bool {
	for _, r := range rep.Results {
		if r.SetupError != "" || r.Errors > 0 {
			return true
		}
	}
	return false
}

// WriteJSON writes the report to dir/bench-<UTC time>.json (creating dir)
// and returns the file's path.
func (rep *Report) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: results dir: %w", err)
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", fmt.Errorf("bench: encode report: %w", err)
	}
	p := filepath.Join(dir, "bench-"+rep.Started.Format("20060102T150405Z")+".json")
	if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("bench: write report: %w", err)
	}
	return p, nil
}
