package bench

import (
	"slices"
	"time"
)

// Result is what one scenario measured. Latencies are of successful calls
// only, from sending the request to having read the whole response body.
type Result struct {
	// Scenario names what was measured ("bare", "mcp-go", "target:echo", ...).
	Scenario string `json:"scenario"`
	// Mode is where the server ran: "child-process", "in-process" (its CPU
	// time is then inside Generator's) or "external".
	Mode string `json:"mode"`
	// Round numbers the repetitions of a suite from 1.
	Round           int    `json:"round"`
	URL             string `json:"url"`
	Method          string `json:"method,omitempty"`
	Tool            string `json:"tool"`
	ProtocolVersion string `json:"protocol_version"`
	Sessions        int    `json:"sessions"`
	Concurrency     int    `json:"concurrency"`
	PayloadBytes    int    `json:"payload_bytes"`
	Client          string `json:"client"`
	// Cold, Contexts and Rate repeat LoadOptions.Cold, .Contexts and .Rate.
	Cold     bool    `json:"cold,omitempty"`
	Contexts int     `json:"contexts,omitempty"`
	Rate     float64 `json:"rate,omitempty"`

	// Calls is the number of calls made in the measured phase, OK the
	// number that succeeded and Errors the rest.
	Calls  int64 `json:"calls"`
	OK     int64 `json:"ok"`
	Errors int64 `json:"errors"`
	// FullChecks is how many responses were decoded and checked in full;
	// the others were byte-identical, but for the id, to a response that
	// was (see respTemplate).
	FullChecks int64 `json:"full_checks"`
	// ErrorKinds counts Errors by kind (http_status, jsonrpc_error,
	// tool_error, wrong_result, timeout, transport, ...).
	ErrorKinds   map[string]int64 `json:"error_kinds,omitempty"`
	ErrorSamples []string         `json:"error_samples,omitempty"`
	// SetupError is set when the scenario did not run (server did not
	// start, sessions could not be opened); nothing else is then measured.
	SetupError string `json:"setup_error,omitempty"`

	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Throughput is successful calls per second.
	Throughput float64        `json:"calls_per_second"`
	Latency    LatencySummary `json:"latency_ms"`
	// ColdCycle is, for a cold run on a session-based version, the latency
	// of whole cycles: initialize, notifications/initialized, the call and
	// DELETE.
	ColdCycle *LatencySummary `json:"cold_cycle_ms,omitempty"`
	// Memory is the servers' RSS before and after a run over new contexts
	// (LoadOptions.Contexts).
	Memory *Memory `json:"memory,omitempty"`

	// Generator is this process (the load generator, and the server too in
	// "in-process" mode); Server is the server's processes, summed, when
	// known, and Processes each of them.
	Generator *ProcStats  `json:"generator,omitempty"`
	Server    *ProcStats  `json:"server,omitempty"`
	Processes []ProcStats `json:"server_processes,omitempty"`
	// GeneratorCPUShare is Generator CPU / (Generator + Server CPU): how
	// much of the machine the load generator itself took.
	GeneratorCPUShare float64 `json:"generator_cpu_share,omitempty"`
	// ServerCPUPerCallMicros and GeneratorCPUPerCallMicros are CPU
	// microseconds per successful call.
	ServerCPUPerCallMicros    float64 `json:"server_cpu_us_per_call,omitempty"`
	GeneratorCPUPerCallMicros float64 `json:"generator_cpu_us_per_call,omitempty"`

	// OtherCPUSeconds is the CPU time the rest of the machine used during
	// the measured phase (Linux); well above zero, the numbers are noisy.
	// With an external server whose PID was not given, it includes that
	// server.
	OtherCPUSeconds float64 `json:"other_cpu_seconds"`

	// Ratios against the report's baseline scenario (absent for it and
	// when it was not measured).
	Ratios *Ratios `json:"ratios,omitempty"`
	// RoundRatios, in a summary entry of a report of several rounds, spreads
	// the throughput ratios of the scenario's rounds, each against the
	// baseline of the same round: how far a ratio read off one round can
	// be trusted on a machine as noisy as the one measured.
	RoundRatios *Spread `json:"round_ratios,omitempty"`

	hist  *histogram
	cycle *histogram
	errs  errorTally
}

// LatencySummary is in milliseconds.
type LatencySummary struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Ratios compare a result with the baseline: Throughput > 1 is faster,
// latency ratios > 1 are slower.
type Ratios struct {
	Baseline   string  `json:"baseline"`
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
}

// Spread summarises a few measurements of one quantity.
type Spread struct {
	N      int     `json:"n"`
	Median float64 `json:"median"` // the lower median for an even N
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf is the Spread of vs (nil for none); it sorts vs.
func spreadOf(vs []float64) *Spread {
	if len(vs) == 0 {
		return nil
	}
	slices.Sort(vs)
	return &Spread{N: len(vs), Median: vs[(len(vs)-1)/2], Min: vs[0], Max: vs[len(vs)-1]}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fill copies the run configuration and the counts into r.
func (r *Result) fill(opts LoadOptions, elapsed time.Duration) {
	r.URL = opts.URL
	r.Method = opts.Method
	r.Tool = opts.Tool
	if opts.Method == MethodToolsList {
		r.Tool = ""
	}
	r.Cold = opts.Cold
	r.Contexts = opts.Contexts
	r.Rate = opts.Rate
	r.ProtocolVersion = opts.ProtocolVersion
	r.Sessions = opts.Sessions
	r.Concurrency = opts.Concurrency
	r.PayloadBytes = opts.PayloadBytes
	r.Client = opts.Client
	if opts.Arguments != nil {
		r.PayloadBytes = len(opts.Arguments)
	}
	r.counts(elapsed)
}

// counts fills the counts and latencies from r.hist, r.cycle and r.errs.
func (r *Result) counts(elapsed time.Duration) {
	r.ElapsedSeconds = elapsed.Seconds()
	if r.cycle != nil && r.cycle.n > 0 {
		c := summarize(r.cycle)
		r.ColdCycle = &c
	}
	h := r.hist
	if h == nil {
		h = &histogram{}
	}
	r.OK = int64(h.n)
	r.Errors = r.errs.n
	r.Calls = r.OK + r.Errors
	r.ErrorKinds = r.errs.kinds
	r.ErrorSamples = r.errs.samples
	if elapsed > 0 {
		r.Throughput = float64(r.OK) / elapsed.Seconds()
	}
	r.Latency = summarize(h)
}

func summarize(h *histogram) LatencySummary {
	return LatencySummary{
		Mean: ms(h.mean()),
		P50:  ms(h.quantile(0.50)),
		P90:  ms(h.quantile(0.90)),
		P99:  ms(h.quantile(0.99)),
		Max:  ms(time.Duration(h.max)),
	}
}

// serverStats reads the server processes after the phase; before holds
// their readings from its start. A process that cannot be read (gone, not
// Linux) leaves Server unset, so a partial sum is never shown as the total.
func (r *Result) serverStats(pids []int, before []cpuTimes) {
	if len(pids) == 0 {
		return
	}
	sum := ProcStats{PeakRSSSince: "process"}
	for i, pid := range pids {
		after := procCPU(pid)
		if !before[i].ok || !after.ok {
			r.Processes = nil
			return
		}
		p := after.sub(before[i])
		p.PID = pid
		p.PeakRSSBytes = peakRSS(pid)
		p.PeakRSSSince = "process"
		r.Processes = append(r.Processes, p)
		sum.UserSeconds += p.UserSeconds
		sum.SystemSeconds += p.SystemSeconds
		sum.CPUSeconds += p.CPUSeconds
		sum.PeakRSSBytes += p.PeakRSSBytes
	}
	if len(pids) == 1 {
		sum.PID = pids[0]
	}
	r.Server = &sum
}

// derive computes the per-call and share figures from the process stats.
func (r *Result) derive() {
	if r.OK > 0 && r.Generator != nil {
		r.GeneratorCPUPerCallMicros = r.Generator.CPUSeconds / float64(r.OK) * 1e6
	}
	if r.OK > 0 && r.Server != nil {
		r.ServerCPUPerCallMicros = r.Server.CPUSeconds / float64(r.OK) * 1e6
	}
	if r.Generator != nil && r.Server != nil {
		if total := r.Generator.CPUSeconds + r.Server.CPUSeconds; total > 0 {
			r.GeneratorCPUShare = r.Generator.CPUSeconds / total
		}
	}
}

func (r *Result) ratiosAgainst(b *Result) {
	if b == nil || b == r || b.SetupError != "" || r.SetupError != "" || b.Throughput == 0 {
		return
	}
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	r.Ratios = &Ratios{
		Baseline:   b.Scenario,
		Throughput: ratio(r.Throughput, b.Throughput),
		P50:        ratio(r.Latency.P50, b.Latency.P50),
		P99:        ratio(r.Latency.P99, b.Latency.P99),
	}
}
