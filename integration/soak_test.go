package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The soak: a mixed load of platform and expert-agent echo calls across
// MCP sessions that open and close all the time, with the subscription LRU
// at its bound (more contexts in use than MaxContexts) and the expert agent
// restarted on a period. It runs SOAK_MINUTES minutes (`make soak`, 10 by
// default, report in results/soak/), or 30 seconds in the normal suite.
//
// It fails only on what is not a matter of speed: a call answered with
// another caller's text, a call that hits its deadline (a hang), a failure
// other than the expected ones (an agent call while the agent restarts),
// goroutines or memory growing between the middle and the end.

const (
	soakMaxContexts = 64
	soakChurners    = 8  // workers that open a session, call a few times, close it
	soakSteady      = 4  // workers that call round the pool of long-lived sessions
	soakPool        = 96 // long-lived sessions: with the churners, more contexts than soakMaxContexts
	soakCallTimeout = 5 * time.Second
	// soakCallDeadline bounds every call on the client side: past it the
	// call is a hang, far above what a restart or the race detector costs.
	soakCallDeadline = 6 * soakCallTimeout
)

// soakKinds are the outcomes of a call. The agent ones are expected for
// agent calls while the agent restarts; the rest fail the soak.
const (
	kindAgentOffline = "agent_offline" // "no expert agent is online"
	kindAgentTimeout = "agent_timeout" // the agent went before it answered
	kindCrossed      = "crossed"       // another caller's answer
	kindHang         = "hang"          // the client's deadline passed
	kindTool         = "tool_error"    // another tool error
	kindProtocol     = "protocol"      // a JSON-RPC or transport error
	kindConnect      = "connect"       // a session could not be opened
)

func soakKind(err error) string {
	var te *toolError
	switch {
	case errors.As(err, new(*crossedError)):
		return kindCrossed
	case errors.Is(err, context.DeadlineExceeded):
		return kindHang
	case errors.As(err, &te) && strings.Contains(te.text, "no expert agent is online"):
		return kindAgentOffline
	case errors.As(err, &te) && strings.Contains(te.text, "did not answer"):
		return kindAgentTimeout
	case errors.As(err, &te):
		return kindTool
	default:
		return kindProtocol
	}
}

// soakSample is the process's state at one moment.
type soakSample struct {
	At         string `json:"at"`
	Goroutines int    `json:"goroutines"`
	RSSBytes   int64  `json:"rssBytes"`
	HeapBytes  uint64 `json:"heapBytes"`
	Contexts   int    `json:"contexts"`
	Pending    int    `json:"pending"`
}

// soakInterval is one period between agent restarts.
type soakInterval struct {
	Calls   int            `json:"calls"`
	Errors  map[string]int `json:"errors,omitempty"`
	P50Ms   float64        `json:"p50Ms"`
	P99Ms   float64        `json:"p99Ms"`
	Restart bool           `json:"agentRestarted"`
}

// soakReport is what the soak prints and writes.
type soakReport struct {
	Started     time.Time                 `json:"started"`
	Duration    string                    `json:"duration"`
	RestartEach string                    `json:"agentRestartEvery"`
	MaxContexts int                       `json:"maxContexts"`
	Calls       map[string]int            `json:"calls"`  // tool -> calls
	Errors      map[string]map[string]int `json:"errors"` // tool -> kind -> count
	Sessions    int64                     `json:"sessionsOpened"`
	Restarts    int                       `json:"agentRestarts"`
	Samples     []soakSample              `json:"samples"` // start, middle, end, settled
	Intervals   []soakInterval            `json:"intervals"`
	Requester   any                       `json:"requester"`
	FirstErrors []string                  `json:"firstErrors,omitempty"`
}

// soakRecorder collects outcomes from the workers.
type soakRecorder struct {
	mu        sync.Mutex
	calls     map[string]int
	errs      map[string]map[string]int
	firstErrs []string
	cur       soakInterval
	lat       []time.Duration
	sessions  atomic.Int64
}

func newSoakRecorder() *soakRecorder {
	return &soakRecorder{calls: map[string]int{}, errs: map[string]map[string]int{}, cur: soakInterval{Errors: map[string]int{}}}
}

func (r *soakRecorder) note(tool string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[tool]++
	r.cur.Calls++
	r.lat = append(r.lat, d)
	if err == nil {
		return
	}
	kind := soakKind(err)
	if r.errs[tool] == nil {
		r.errs[tool] = map[string]int{}
	}
	r.errs[tool][kind]++
	r.cur.Errors[kind]++
	if len(r.firstErrs) < 20 && kind != kindAgentOffline {
		r.firstErrs = append(r.firstErrs, tool+": "+kind+": "+err.Error())
	}
}

// cut closes the current interval.
func (r *soakRecorder) cut(restarted bool) soakInterval {
	r.mu.Lock()
	iv, lat := r.cur, r.lat
	r.cur, r.lat = soakInterval{Errors: map[string]int{}}, nil
	r.mu.Unlock()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	iv.P50Ms, iv.P99Ms, iv.Restart = pct(0.50), pct(0.99), restarted
	return iv
}

// soakDuration reads SOAK_MINUTES (fractions allowed); 30 s without it.
func soakDuration(t *testing.T) (total, restartEvery time.Duration, long bool) {
	t.Helper()
	v := os.Getenv("SOAK_MINUTES")
	if v == "" {
		return 30 * time.Second, 10 * time.Second, false
	}
	m, err := strconv.ParseFloat(v, 64)
	if err != nil || m <= 0 {
		t.Fatalf("SOAK_MINUTES=%q: want a positive number of minutes", v)
	}
	return time.Duration(m * float64(time.Minute)), time.Minute, true
}

// rssBytes is the resident set of this process (Linux), or 0.
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func takeSample(at string, srv *server.Server) soakSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := srv.Requester().Stats()
	return soakSample{At: at, Goroutines: runtime.NumGoroutine(), RSSBytes: rssBytes(), HeapBytes: ms.HeapAlloc,
		Contexts: st.Contexts, Pending: st.Pending}
}

// soakConnect opens a go-sdk session without the test's helpers (which
// fail the test and register a cleanup each: thousands here).
func soakConnect(ctx context.Context, url, token, version string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-soak", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	return c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

// soakCall makes one bounded echo call and records it.
func soakCall(rec *soakRecorder, cs *mcp.ClientSession, tool, text string) {
	ctx, cancel := context.WithTimeout(context.Background(), soakCallDeadline)
	defer cancel()
	start := time.Now()
	_, err := callEcho(ctx, cs, tool, text)
	rec.note(tool, time.Since(start), err)
}

func TestSoak(t *testing.T) {
	total, restartEvery, long := soakDuration(t)
	srv := startServer(t, server.Config{MaxContexts: soakMaxContexts, CallTimeout: soakCallTimeout,
		Logger: testenv.LoggerAt(t, "", logrus.ErrorLevel)})
	url := "http://" + srv.HTTPAddr().String() + "/api/v1/mcp"
	secret, _, err := srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "soak"})
	if err != nil {
		t.Fatal(err)
	}
	stopAgent := startTestAgent(t, srv, "soakagent")

	pool := make([]*mcp.ClientSession, soakPool)
	for i := range pool {
		cs, err := soakConnect(testCtx(t, 30*time.Second), url, secret, protocolVersions[i%len(protocolVersions)])
		if err != nil {
			t.Fatalf("pool session %d: %v", i, err)
		}
		pool[i] = cs
	}
	rec := newSoakRecorder()
	rep := soakReport{Started: time.Now().UTC(), Duration: total.String(), RestartEach: restartEvery.String(),
		MaxContexts: soakMaxContexts}
	rep.Samples = append(rep.Samples, takeSample("start", srv))
	baseline := rep.Samples[0].Goroutines

	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for w := range soakChurners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for s := 0; !stopped(); s++ {
				ctx, cancel := context.WithTimeout(context.Background(), soakCallDeadline)
				cs, err := soakConnect(ctx, url, secret, protocolVersions[rng.IntN(len(protocolVersions))])
				cancel()
				if err != nil {
					rec.note("initialize", 0, fmt.Errorf("%s: %w", kindConnect, err))
					continue
				}
				rec.sessions.Add(1)
				for c := range 2 + rng.IntN(8) {
					tool := "echo"
					if rng.IntN(2) == 0 {
						tool = "platform_echo"
					}
					soakCall(rec, cs, tool, fmt.Sprintf("c%d-s%d-%d", w, s, c))
				}
				_ = cs.Close()
			}
		}()
	}
	for w := range soakSteady {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stopped(); n++ {
				i := (n*soakSteady + w) % soakPool
				tool := "echo"
				if n%3 == 0 {
					tool = "platform_echo"
				}
				soakCall(rec, pool[i], tool, fmt.Sprintf("p%d-%d-%d", w, i, n))
			}
		}()
	}

	end := time.Now().Add(total)
	middle := time.Now().Add(total / 2)
	tick := time.NewTicker(restartEvery)
	defer tick.Stop()
	midTimer := time.NewTimer(time.Until(middle))
	defer midTimer.Stop()
	endTimer := time.NewTimer(time.Until(end))
	defer endTimer.Stop()
loop:
	for {
		select {
		case <-midTimer.C:
			rep.Samples = append(rep.Samples, takeSample("middle", srv))
		case <-tick.C:
			if time.Until(end) < restartEvery/2 {
				continue // no restart in the last half period: the end sample is of a settled agent
			}
			stopAgent()
			stopAgent = startTestAgent(t, srv, "soakagent")
			rep.Restarts++
			iv := rec.cut(true)
			rep.Intervals = append(rep.Intervals, iv)
			if long {
				t.Logf("interval %d: %d calls, p99 %.1f ms, errors %v", len(rep.Intervals), iv.Calls, iv.P99Ms, iv.Errors)
			}
		case <-endTimer.C:
			break loop
		}
	}
	rep.Samples = append(rep.Samples, takeSample("end", srv))
	rep.Intervals = append(rep.Intervals, rec.cut(false))
	close(stop)
	wg.Wait()
	for _, cs := range pool {
		_ = cs.Close()
	}
	poll(t, 30*time.Second, "no call pending", func() bool { return srv.Requester().Stats().Pending == 0 })
	settled := func() bool { return runtime.NumGoroutine() <= baseline+50 }
	pollQuiet(60*time.Second, settled)
	rep.Samples = append(rep.Samples, takeSample("settled", srv))

	rec.mu.Lock()
	rep.Calls, rep.Errors, rep.FirstErrors = rec.calls, rec.errs, rec.firstErrs
	rec.mu.Unlock()
	rep.Sessions = rec.sessions.Load()
	rep.Requester = srv.Requester().Stats()
	out, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("soak report:\n%s", out)
	if long {
		writeSoakReport(t, out)
	}

	// What fails the soak: nothing here is a speed.
	for tool, kinds := range rep.Errors {
		for kind, n := range kinds {
			expected := tool == "echo" && (kind == kindAgentOffline || kind == kindAgentTimeout)
			if !expected {
				t.Errorf("%d %s calls failed with %s (first errors: %v)", n, tool, kind, rep.FirstErrors)
			}
		}
	}
	if rep.Calls["echo"] == 0 || rep.Calls["platform_echo"] == 0 {
		t.Errorf("calls: %v; want both kinds", rep.Calls)
	}
	mid, last, done := rep.Samples[1], rep.Samples[2], rep.Samples[3]
	if last.Goroutines > mid.Goroutines+50 {
		t.Errorf("goroutines grew under the same load: middle %d, end %d", mid.Goroutines, last.Goroutines)
	}
	if done.Goroutines > baseline+50 {
		t.Errorf("goroutines after the load: %d, at the start %d", done.Goroutines, baseline)
	}
	if last.RSSBytes > 2*mid.RSSBytes+256<<20 {
		t.Errorf("RSS grew under the same load: middle %d MiB, end %d MiB", mid.RSSBytes>>20, last.RSSBytes>>20)
	}
	if st := srv.Requester().Stats(); st.Contexts > soakMaxContexts+st.Pinned {
		t.Errorf("%d contexts subscribed, over the bound %d (+%d pinned)", st.Contexts, soakMaxContexts, st.Pinned)
	}
	if st := srv.Requester().Stats(); st.Evictions == 0 {
		t.Errorf("no eviction: the LRU never reached its bound (%+v)", st)
	}
}

// pollQuiet waits until cond or d, without failing: the caller judges.
func pollQuiet(d time.Duration, cond func() bool) {
	for deadline := time.Now().Add(d); !cond() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
}

// writeSoakReport writes the report to results/soak/ at the module root.
func writeSoakReport(t *testing.T, b []byte) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "results", "soak"))
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("report: %v", err)
		return
	}
	path := filepath.Join(dir, "soak-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Errorf("report: %v", err)
		return
	}
	t.Logf("report written to %s", path)
}
