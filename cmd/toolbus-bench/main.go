// Command toolbus-bench measures MCP tools/call throughput and latency of
// toolbus beside the servers a user would run instead, in one run on one
// machine, and prints a table with ratios (JSON goes to --out).
//
//	toolbus-bench                               # the four baselines, 10 s each
//	toolbus-bench --target http://127.0.0.1:8080/api/v1/mcp --token T --tool echo,platform_whoami \
//	    --tool-args 'platform_whoami={}' --target-pid GATEWAY_PID,AGENT_PID
//	toolbus-bench --scenario bare,mcp-go@2026-07-28 --duration 3s --payload 1024
//	toolbus-bench --rounds 3                     # interleaved repeats on a busy machine
//	toolbus-bench --scenario target --target URL --method tools/list --min-tools 100
//	toolbus-bench --scenario target --target URL --cold --baseline target:echo   # cold vs warm contexts
//	toolbus-bench --scenario target --target URL --protocol-version 2026-07-28 --contexts 20000 --calls 20000
//	toolbus-bench --scenario mcp-go,target --target URL --mqtt-floor tcp://127.0.0.1:1883 --mqtt-username U
//	toolbus-bench --merge results/run-X --out results  # one table, JSON and SVG chart of several runs
//
// Baselines run in child processes (this binary with --serve), so that the
// server's and the load generator's CPU time and peak RSS are reported apart;
// --inprocess runs them inside this process instead.
//
// Every flag also reads the environment variable TOOLBUS_BENCH_<FLAG>
// (e.g. TOOLBUS_BENCH_TOKEN); a flag on the command line wins.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/bench"
)

const envPrefix = "TOOLBUS_BENCH_"

// exitFailedCalls is the exit status of a run that completed but had failed
// calls or scenarios that did not run.
const exitFailedCalls = 2

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type config struct {
	scenarios   string
	target      string
	targetPIDs  string
	token       string
	tools       string
	args        string
	toolArgs    toolArgs
	version     string
	baseline    string
	out         string
	inProcess   bool
	serve       string
	pause       time.Duration
	rounds      int
	logLevel    string
	cpuProfile  string
	load        bench.LoadOptions
	scenarioSet bool

	label        string
	title        string
	notes        multiFlag
	compare      multiFlag
	extraTargets multiFlag
	cold         bool
	contexts     int
	chart        bool
	merge        string
	command      string
	floorURL     string
	floorUser    string
	floorPass    string
	floorPIDs    string
	floorQoS0    bool
	floorClient  string
	floorAgent   string
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

func (m *multiFlag) Set(v string) error {
	*m = append(*m, v)
	return nil
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("toolbus-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.scenarios, "scenario", "baselines", `comma-separated scenarios: "baselines" (all four), `+
		strings.Join(bench.BaselineNames(), ", ")+`, "target" (the --target endpoint); each may end in @<protocol version>`)
	fs.StringVar(&c.target, "target", "", "URL of an external MCP endpoint to measure (e.g. the toolbus gateway); adds the target scenario")
	fs.StringVar(&c.targetPIDs, "target-pid", "", "PIDs of the --target server's processes, comma-separated (e.g. gateway,agent), to report their CPU time and peak RSS (Linux /proc)")
	fs.StringVar(&c.token, "token", "", "bearer token sent to --target (prefer "+envPrefix+"TOKEN)")
	fs.StringVar(&c.tools, "tool", bench.EchoTool, "tool(s) to call on --target, comma-separated: one scenario each")
	fs.StringVar(&c.args, "args", "", `JSON arguments for --target's tool calls; default {"text": <payload>} with the echo checked, otherwise any non-error result passes`)
	fs.Var(&c.toolArgs, "tool-args", `NAME=JSON: arguments for one --target tool (repeatable), e.g. --tool-args 'platform_whoami={}'; wins over --args`)
	fs.IntVar(&c.load.Sessions, "sessions", bench.DefaultSessions, "MCP sessions per scenario")
	fs.IntVar(&c.load.Concurrency, "concurrency", 0, "calls in flight at once (0 = --sessions)")
	fs.DurationVar(&c.load.Duration, "duration", bench.DefaultDuration, "measured time per scenario")
	fs.IntVar(&c.load.Calls, "calls", 0, "measure this many calls per scenario instead of --duration")
	fs.Float64Var(&c.load.Rate, "rate", 0, "pace the calls at this many per second in all (open loop, latency counted from when each call was due): latencies compare at the same offered load; 0 = as fast as the server answers (saturated)")
	fs.DurationVar(&c.load.Warmup, "warmup", time.Second, "unmeasured warm-up per scenario")
	fs.IntVar(&c.load.PayloadBytes, "payload", bench.DefaultPayloadBytes, "bytes of echoed text per call")
	fs.StringVar(&c.version, "protocol-version", "", "protocol version for every scenario (default: "+bench.ProtocolModern+
		" for go-sdk-stateless, "+bench.ProtocolLegacy+" otherwise; @version in --scenario wins)")
	fs.StringVar(&c.load.Client, "client", "", `HTTP client of the measured calls: "`+bench.ClientRaw+`" (default for http://) or "`+bench.ClientNetHTTP+`"`)
	fs.DurationVar(&c.load.CallTimeout, "timeout", bench.DefaultCallTimeout, "deadline of each call")
	fs.StringVar(&c.baseline, "baseline", bench.BaselineMCPGo, "scenario the ratios are computed against")
	fs.StringVar(&c.out, "out", "results", `directory for the JSON report ("" = none)`)
	fs.BoolVar(&c.inProcess, "inprocess", false, "run baseline servers inside this process (CPU and RSS are then shared with the generator)")
	fs.IntVar(&c.rounds, "rounds", 1, "run the scenario list this many times, interleaved; the table shows each scenario's median round")
	fs.DurationVar(&c.pause, "pause", time.Second, "pause between scenarios")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the load generator, and in-process servers) to this file")
	fs.StringVar(&c.load.Method, "method", bench.MethodToolsCall, "request to measure: "+bench.MethodToolsCall+" or "+bench.MethodToolsList)
	fs.IntVar(&c.load.MinTools, "min-tools", 0, "with --method tools/list: fewest tools a list must hold to count as a success")
	fs.StringVar(&c.label, "label", "", `name of the --target scenario ("<label>:<tool>" with several tools; default "target:<tool>")`)
	fs.Var(&c.extraTargets, "extra-target", "NAME=URL[=PID,PID...]: another endpoint measured like --target (same tools, token and options), as scenario NAME (repeatable)")
	fs.BoolVar(&c.cold, "cold", false, `also measure each target scenario with every call in a new context ("<name> cold"): a new session per call (initialize, call, DELETE), or a new entity path on the stateless version`)
	fs.IntVar(&c.contexts, "contexts", 0, "spread each target scenario's calls over this many contexts (entity paths /"+bench.ContextEntityType+"/<id>); with --calls equal to it every call opens a context, and the RSS of --target-pid is reported per context")
	fs.StringVar(&c.title, "title", "", "title of the report (printed above the table)")
	fs.Var(&c.notes, "note", "a sentence printed under the table and kept in the report (repeatable)")
	fs.Var(&c.compare, "compare", `"<scenario> vs <other scenario>": also give that ratio round by round, under the table and in the report (repeatable), e.g. "target:echo vs go-sdk"`)
	fs.BoolVar(&c.chart, "chart", true, "write an SVG chart beside the JSON report")
	fs.StringVar(&c.merge, "merge", "", "read every bench-*.json report under this directory and print, with --out, write them as one JSON and SVG chart (no measuring)")
	fs.StringVar(&c.command, "command", "", "with --merge: the command line that produced the reports, kept in the merged JSON")
	fs.StringVar(&c.floorURL, "mqtt-floor", "", "also measure a raw MQTT request/response round trip through this broker (tcp://host:port), without HTTP: scenario "+bench.MQTTFloorScenario+"; an expert agent serving --tool echo must be connected")
	fs.StringVar(&c.floorUser, "mqtt-username", "", "MQTT identity of --mqtt-floor (role platform)")
	fs.StringVar(&c.floorPass, "mqtt-password", "", "its password (prefer "+envPrefix+"MQTT_PASSWORD)")
	fs.StringVar(&c.floorPIDs, "mqtt-floor-pid", "", "PIDs of the broker's and the agent's processes for "+bench.MQTTFloorScenario+" (default: --target-pid)")
	fs.BoolVar(&c.floorQoS0, "mqtt-qos0", false, "the MQTT floor at QoS 0 (default QoS 1, what the gateway and the agents use)")
	fs.StringVar(&c.floorAgent, "mqtt-floor-agent", "bench-agent", "the expert agent (its MQTT username) the MQTT floor's requests go to")
	fs.StringVar(&c.floorClient, "mqtt-floor-client", "raw", `requester of the MQTT floor: "raw" (a lean MQTT client: one connection, one reader goroutine) or "paho" (paho.mqtt.golang)`)
	fs.StringVar(&c.serve, "serve", "", "internal: serve this baseline for a parent toolbus-bench and exit when stdin closes")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", env, err)
			}
			set[f.Name] = true
		}
	})
	if envErr != nil {
		return config{}, envErr
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.scenarioSet = set["scenario"]
	return c, nil
}

// scenarioList expands --scenario, adding one target scenario per --tool
// (and per --extra-target), their cold variants, and the MQTT floor.
func (c config) scenarioList() ([]bench.Scenario, error) {
	list := c.scenarios
	if c.target != "" && !c.scenarioSet {
		list += ",target"
	}
	parsed, err := bench.ParseScenarios(list)
	if err != nil {
		return nil, err
	}
	var argsJSON json.RawMessage
	if c.args != "" {
		if !json.Valid([]byte(c.args)) {
			return nil, errors.New("--args is not valid JSON")
		}
		argsJSON = json.RawMessage(c.args)
	}
	pids, err := parsePIDs("--target-pid", c.targetPIDs)
	if err != nil {
		return nil, err
	}
	type endpoint struct {
		label, url string
		pids       []int
	}
	targets := []endpoint{{c.label, c.target, pids}}
	for _, e := range c.extraTargets {
		parts := strings.SplitN(e, "=", 3) // a gateway URL holds no "="
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("--extra-target: want NAME=URL[=PIDS], got %q", e)
		}
		name, u, pidList := parts[0], parts[1], ""
		if len(parts) == 3 {
			pidList = parts[2]
		}
		p, err := parsePIDs("--extra-target "+name, pidList)
		if err != nil {
			return nil, err
		}
		targets = append(targets, endpoint{name, u, p})
	}
	var tools []string
	for tool := range strings.SplitSeq(c.tools, ",") {
		if tool = strings.TrimSpace(tool); tool != "" {
			tools = append(tools, tool)
		}
	}
	var out []bench.Scenario
	for _, s := range parsed {
		atVersion := s.ProtocolVersion // "target@<version>": named apart from the plain target
		if s.ProtocolVersion == "" {
			s.ProtocolVersion = c.version
		}
		if s.Baseline != "" {
			out = append(out, s)
			continue
		}
		if c.target == "" {
			return nil, errors.New(`scenario "target" needs --target`)
		}
		for _, tg := range targets {
			for _, tool := range tools {
				t := s
				t.URL, t.PIDs, t.Token, t.Tool, t.Arguments = tg.url, tg.pids, c.token, tool, argsJSON
				if a, ok := c.toolArgs[tool]; ok {
					t.Arguments = a
				}
				switch {
				case tg.label != "" && len(tools) > 1:
					t.Name = tg.label + ":" + tool
				case tg.label != "":
					t.Name = tg.label
				case c.load.Method == bench.MethodToolsList:
					t.Name = "target:tools/list"
				}
				if t.Name != "" && atVersion != "" {
					t.Name += "@" + atVersion
				}
				t.Contexts = c.contexts
				out = append(out, t)
				if c.cold {
					cold := t
					if cold.Name == "" {
						cold.Name = "target:" + tool
					}
					cold.Name += " cold"
					cold.Cold = true
					out = append(out, cold)
				}
			}
		}
	}
	if c.floorURL != "" {
		if err := bench.CheckMQTTFloorClient(c.floorClient); err != nil {
			return nil, fmt.Errorf("--mqtt-floor-client: %w", err)
		}
		fp := pids
		if c.floorPIDs != "" {
			if fp, err = parsePIDs("--mqtt-floor-pid", c.floorPIDs); err != nil {
				return nil, err
			}
		}
		out = append(out, bench.Scenario{PIDs: fp, Tool: bench.EchoTool, MQTTFloor: &bench.MQTTFloorOptions{
			BrokerURL: c.floorURL, Username: c.floorUser, Password: c.floorPass, QoS0: c.floorQoS0, Client: c.floorClient, Agent: c.floorAgent,
		}})
	}
	return out, nil
}

// parsePIDs reads a comma-separated PID list.
func parsePIDs(flagName, list string) ([]int, error) {
	var pids []int
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s: %q is not a PID", flagName, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// toolArgs is the repeatable --tool-args NAME=JSON flag.
type toolArgs map[string]json.RawMessage

func (t *toolArgs) String() string {
	var parts []string
	for name, a := range *t {
		parts = append(parts, name+"="+string(a))
	}
	return strings.Join(parts, " ")
}

func (t *toolArgs) Set(v string) error {
	name, args, ok := strings.Cut(v, "=")
	if !ok || name == "" || !json.Valid([]byte(args)) {
		return fmt.Errorf("want NAME=JSON, got %q", v)
	}
	if *t == nil {
		*t = toolArgs{}
	}
	(*t)[name] = json.RawMessage(args)
	return nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "toolbus-bench:", err)
		return 1
	}
	log, err := newLogger(c.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "toolbus-bench:", err)
		return 1
	}
	if c.merge != "" {
		return mergeReports(c, stdout, stderr)
	}
	if c.serve != "" {
		if err := bench.ServeChild(ctx, c.serve, stdin, stdout, bench.ServerOptions{Logger: log}); err != nil {
			fmt.Fprintln(stderr, "toolbus-bench --serve:", err)
			return 1
		}
		return 0
	}
	scenarios, err := c.scenarioList()
	if err != nil {
		fmt.Fprintln(stderr, "toolbus-bench:", err)
		return 1
	}
	var pairs []bench.Pair
	for _, v := range c.compare {
		p, err := bench.ParsePair(v)
		if err != nil {
			fmt.Fprintln(stderr, "toolbus-bench: --compare:", err)
			return 1
		}
		pairs = append(pairs, p)
	}
	opts := bench.SuiteOptions{
		Compare:   pairs,
		Scenarios: scenarios,
		Load:      c.load,
		Baseline:  c.baseline,
		Title:     c.title,
		Notes:     c.notes,
		Pause:     c.pause,
		Rounds:    c.rounds,
		Logger:    log,
	}
	if !c.inProcess {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "toolbus-bench: cannot find own executable for child servers (use --inprocess):", err)
			return 1
		}
		opts.Child = bench.ChildOptions{
			Command: []string{exe, "--log-level", c.logLevel, "--serve"},
			Stderr:  stderr,
		}
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "toolbus-bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "toolbus-bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench.RunSuite(ctx, opts)
	if rep != nil && len(rep.Results) > 0 {
		if werr := rep.WriteTable(stdout); werr != nil {
			fmt.Fprintln(stderr, "toolbus-bench:", werr)
		}
		if c.out != "" {
			p, werr := rep.WriteJSON(c.out)
			if werr != nil {
				fmt.Fprintln(stderr, "toolbus-bench:", werr)
				return 1
			}
			fmt.Fprintln(stdout, "report:", p)
			if c.chart {
				svg := strings.TrimSuffix(p, ".json") + ".svg"
				if werr := bench.WriteSVGFile(svg, []*bench.Report{rep}); werr != nil {
					fmt.Fprintln(stderr, "toolbus-bench:", werr)
					return 1
				}
				fmt.Fprintln(stdout, "chart:", svg)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "toolbus-bench:", err)
		return 1
	}
	if rep.Failed() {
		return exitFailedCalls
	}
	return 0
}

// mergeReports is --merge: one table, JSON and chart of the reports under
// c.merge. Its exit status is exitFailedCalls when any of them failed.
func mergeReports(c config, stdout, stderr io.Writer) int {
	reps, err := bench.ReadReports(c.merge)
	if err != nil {
		fmt.Fprintln(stderr, "toolbus-bench:", err)
		return 1
	}
	col := bench.NewCollection(c.command, reps)
	if err := col.WriteTable(stdout); err != nil {
		fmt.Fprintln(stderr, "toolbus-bench:", err)
		return 1
	}
	if c.out != "" {
		j, svg, err := col.WriteFiles(c.out)
		if err != nil {
			fmt.Fprintln(stderr, "toolbus-bench:", err)
			return 1
		}
		fmt.Fprintln(stdout, "report:", j)
		fmt.Fprintln(stdout, "chart:", svg)
	}
	if col.Failed() {
		return exitFailedCalls
	}
	return 0
}

func newLogger(level string, out io.Writer) (*logrus.Entry, error) {
	l := logrus.New()
	l.Out = out
	lv, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l.SetLevel(lv)
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	return logrus.NewEntry(l).WithField("app", "toolbus-bench"), nil
}
