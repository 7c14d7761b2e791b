package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
)

// HTTP clients of the load generator.
const (
	// ClientRaw writes pre-encoded HTTP/1.1 requests on one connection per
	// worker and parses responses in place (see rawConn): about half the
	// CPU per call of net/http's client.
	ClientRaw = "raw"
	// ClientNetHTTP is net/http's client with keep-alive.
	ClientNetHTTP = "net/http"
)

// Methods the load generator can call (LoadOptions.Method).
const (
	MethodToolsCall = "tools/call"
	MethodToolsList = "tools/list"
)

// ContextEntityType is the entity type of the paths LoadOptions.Contexts and
// a stateless LoadOptions.Cold spread calls over: the gateway derives an MQTT
// context from /api/v1/mcp/{entityType}/{entityId}.
const ContextEntityType = "bench"

// Load generator defaults (the zero values of LoadOptions).
const (
	DefaultSessions     = 32
	DefaultDuration     = 10 * time.Second
	DefaultPayloadBytes = 16
	DefaultCallTimeout  = 10 * time.Second
)

// ErrSetup wraps every failure to set up the sessions of a run (initialize,
// server/discover): the run did not start.
var ErrSetup = errors.New("bench: session setup failed")

// LoadOptions configure one load run against one MCP endpoint. The zero
// value of every field but URL has a documented default.
type LoadOptions struct {
	// URL of the MCP endpoint (required).
	URL string
	// Token, if set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Method of every measured request: MethodToolsCall ("" means it) or
	// MethodToolsList.
	Method string
	// MinTools, with MethodToolsList, is how many tools the (first page of
	// the) list must hold for a call to count as a success; 0 means any.
	MinTools int
	// Tool to call; "" means EchoTool. Unused with MethodToolsList.
	Tool string
	// Arguments of every call. nil means {"text": <PayloadBytes of text>}
	// and the result must be exactly that text as one text content; with
	// explicit Arguments any non-error result counts as success.
	Arguments json.RawMessage
	// ProtocolVersion to speak; "" means ProtocolLegacy. Versions before
	// ProtocolModern open each session with initialize and
	// notifications/initialized; ProtocolModern sends per-request _meta and
	// the Mcp-Method/Mcp-Name headers, after one server/discover per session.
	ProtocolVersion string
	// Cold makes every measured call the first of a new context. On a
	// session-based version each call opens a new session (initialize,
	// notifications/initialized), makes the call and ends the session with
	// DELETE; on the stateless version (no sessions) each call goes to a
	// fresh entity path (see ContextEntityType). The latency recorded is the
	// call's alone; Result.ColdCycle has the whole cycle's.
	Cold bool
	// Contexts, if > 0, sends measured call n to the entity path
	// <URL>/<ContextEntityType>/<run>-<n mod Contexts>, so that calls spread
	// over that many contexts (with Calls == Contexts, each call opens one);
	// the warm-up stays on URL. With ServerPIDs, Result.Memory has the
	// servers' RSS before and after. Only for a toolbus gateway: other
	// servers have no entity paths.
	Contexts int
	// Sessions is the number of MCP sessions; 0 means DefaultSessions.
	Sessions int
	// Concurrency is the number of calls in flight at once; 0 means
	// Sessions. Worker i uses session i mod Sessions.
	Concurrency int
	// Calls, if > 0, ends the measured phase after that many calls;
	// otherwise it lasts Duration.
	Calls int
	// Duration of the measured phase when Calls is 0; 0 means
	// DefaultDuration.
	Duration time.Duration
	// Warmup is run before the measured phase and not counted; 0 means none.
	Warmup time.Duration
	// Rate, if > 0, paces the calls (warm-up included) at this many per
	// second in all, in an open loop: worker i of n sends at fixed times,
	// n/Rate apart, and a call's latency counts from the time it was due,
	// so a server that falls behind is charged for the wait (no coordinated
	// omission). Latencies of servers are comparable only at the same
	// Rate: unpaced (0, the default), every server runs saturated and its
	// latency is the queue that its own speed builds.
	Rate float64
	// PayloadBytes is the length of the echoed text; 0 means
	// DefaultPayloadBytes.
	PayloadBytes int
	// CallTimeout bounds each HTTP exchange; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Client is the HTTP client of the measured calls: ClientRaw (default
	// for http:// URLs) or ClientNetHTTP (always used for https:// and for
	// session setup).
	Client string
	// ServerPIDs are the processes that serve the endpoint (a gateway and
	// the expert agent behind it, say): Result.Server sums their CPU time
	// during the measured phase and their peak RSS, Result.Processes has
	// each. Empty means unknown.
	ServerPIDs []int
	// MaxErrorSamples is how many distinct error messages to keep; 0 means 5.
	MaxErrorSamples int
	// Logger receives progress; nil means discard.
	Logger *logrus.Entry
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Method == "" {
		o.Method = MethodToolsCall
	}
	if o.Tool == "" {
		o.Tool = EchoTool
	}
	if o.ProtocolVersion == "" {
		o.ProtocolVersion = ProtocolLegacy
	}
	if o.Sessions <= 0 {
		o.Sessions = DefaultSessions
	}
	if o.Concurrency <= 0 {
		o.Concurrency = o.Sessions
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.PayloadBytes <= 0 {
		o.PayloadBytes = DefaultPayloadBytes
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.Client == "" {
		o.Client = ClientRaw
		if strings.HasPrefix(o.URL, "https:") {
			o.Client = ClientNetHTTP
		}
	}
	if o.MaxErrorSamples <= 0 {
		o.MaxErrorSamples = 5
	}
	o.Logger = logutil.Component(o.Logger, "bench-load")
	return o
}

// payloadText is a deterministic ASCII text of n bytes that needs no JSON
// escaping.
func payloadText(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var b strings.Builder
	b.Grow(n)
	for i := range n {
		b.WriteByte(alphabet[i%len(alphabet)])
	}
	return b.String()
}

// newHTTPClient is a keep-alive client with an idle connection for every
// worker, so the run never pays a TCP handshake after setup.
func newHTTPClient(conns int, timeout time.Duration) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr, Timeout: timeout}, tr
}

// Run drives opts.URL and returns what it measured. The returned error is
// only for a run that could not start (bad options, ErrSetup); failed calls
// are counted in the Result.
func Run(ctx context.Context, opts LoadOptions) (*Result, error) {
	opts = opts.withDefaults()
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bench: bad URL %q", opts.URL)
	}
	switch {
	case opts.Client == ClientRaw && u.Scheme != "http":
		return nil, fmt.Errorf("bench: the %s client speaks plain http only", ClientRaw)
	case opts.Client != ClientRaw && opts.Client != ClientNetHTTP:
		return nil, fmt.Errorf("bench: unknown client %q", opts.Client)
	case strings.ContainsAny(opts.Token, "\r\n"), strings.ContainsAny(opts.Tool, "\r\n"):
		return nil, errors.New("bench: token or tool name holds a line break")
	case opts.Method != MethodToolsCall && opts.Method != MethodToolsList:
		return nil, fmt.Errorf("bench: unknown method %q (want %s or %s)", opts.Method, MethodToolsCall, MethodToolsList)
	case opts.Contexts < 0:
		return nil, errors.New("bench: negative Contexts")
	case checkRate(opts.Rate) != nil:
		return nil, checkRate(opts.Rate)
	case opts.Rate > 0 && opts.Cold:
		return nil, errors.New("bench: Rate and Cold together are not supported (a cold call's latency excludes its session's setup, which a paced schedule would count)")
	}
	var expect *string
	args := opts.Arguments
	if opts.Method == MethodToolsList {
		args = nil
	} else if args == nil {
		text := payloadText(opts.PayloadBytes)
		expect = &text
		args, _ = json.Marshal(map[string]string{"text": text})
	} else if !json.Valid(args) {
		return nil, errors.New("bench: Arguments are not valid JSON")
	}
	client, tr := newHTTPClient(opts.Concurrency, opts.CallTimeout)
	defer tr.CloseIdleConnections()

	c := &caller{opts: opts, url: u, client: client, run: randomHex(4)}
	sessions, err := c.openSessions(ctx)
	defer c.closeSessions(sessions)
	if err != nil {
		return nil, err
	}
	workers := c.newWorkers(sessions, encodeCall(opts, args), expect)
	defer closeWorkers(workers)

	if opts.Warmup > 0 {
		opts.Logger.WithField("warmup", opts.Warmup).Debug("warming up")
		c.phase(ctx, workers, 0, opts.Warmup, nil)
	}
	var mem *memoryProbe
	if opts.Contexts > 0 {
		mem = probeMemory(opts.ServerPIDs)
	}
	m := startMeter(opts.ServerPIDs)
	res := &Result{}
	c.measured.Store(true)
	c.phase(ctx, workers, opts.Calls, opts.Duration, res)
	elapsed := m.elapsed()
	res.fill(opts, elapsed)
	m.finish(res)
	if mem != nil {
		res.Memory = mem.finish(opts.Contexts)
	}
	return res, ctx.Err()
}

// meter brackets a measured phase: this process's and the servers' CPU
// time, the machine's, and this process's peak RSS.
type meter struct {
	pids       []int
	rssScoped  bool
	selfBefore cpuTimes
	busyBefore time.Duration
	busyOK     bool
	srvBefore  []cpuTimes
	start      time.Time
}

func startMeter(pids []int) *meter {
	runtime.GC()
	m := &meter{pids: pids, rssScoped: resetPeakRSS(), selfBefore: selfCPU()}
	m.busyBefore, m.busyOK = machineBusy()
	m.srvBefore = make([]cpuTimes, len(pids))
	for i, pid := range pids {
		m.srvBefore[i] = procCPU(pid)
	}
	m.start = time.Now()
	return m
}

func (m *meter) elapsed() time.Duration { return time.Since(m.start) }

// finish fills res's process figures; res's counts must be filled.
func (m *meter) finish(res *Result) {
	selfAfter := selfCPU()
	busyAfter, busyOK := machineBusy()
	if m.selfBefore.ok && selfAfter.ok {
		g := selfAfter.sub(m.selfBefore)
		res.Generator = &g
	} else {
		res.Generator = &ProcStats{}
	}
	res.Generator.PeakRSSBytes = peakRSS(0)
	res.Generator.PeakRSSSince = "process"
	if m.rssScoped {
		res.Generator.PeakRSSSince = "phase"
	}
	res.serverStats(m.pids, m.srvBefore)
	if m.busyOK && busyOK {
		other := (busyAfter - m.busyBefore).Seconds() - res.Generator.CPUSeconds
		if res.Server != nil {
			other -= res.Server.CPUSeconds
		}
		// Clock-tick resolution can make it slightly negative.
		res.OtherCPUSeconds = max(other, 0)
	}
	res.derive()
}

// caller holds what every worker shares.
type caller struct {
	opts   LoadOptions
	url    *url.URL
	client *http.Client
	// run prefixes the entity IDs of Contexts and Cold, so that two runs
	// against one gateway never share a context.
	run string
	// measured is set once the warm-up is over: Contexts and Cold spread
	// only measured calls.
	measured atomic.Bool
	ctxSeq   atomic.Int64
}

// contextPath returns the entity path of the next measured call, or "" to
// use the session's URL.
func (c *caller) contextPath() string {
	if !c.measured.Load() {
		return ""
	}
	var n int64
	switch {
	case c.opts.Cold && isModern(c.opts.ProtocolVersion):
		n = c.ctxSeq.Add(1) - 1
	case c.opts.Contexts > 0:
		n = (c.ctxSeq.Add(1) - 1) % int64(c.opts.Contexts)
	default:
		return ""
	}
	return strings.TrimSuffix(c.url.Path, "/") + "/" + ContextEntityType + "/" + c.run + "-" + strconv.FormatInt(n, 10)
}

// encodedCall is a tools/call request encoded once: a body is prefix + id +
// suffix, so each call costs one append instead of a JSON encoding.
type encodedCall struct {
	prefix, suffix []byte
}

func encodeCall(opts LoadOptions, args json.RawMessage) encodedCall {
	params := map[string]any{}
	if opts.Method == MethodToolsCall {
		params["name"], params["arguments"] = opts.Tool, args
	}
	if isModern(opts.ProtocolVersion) {
		params["_meta"] = modernMeta(opts.ProtocolVersion)
	}
	p, _ := json.Marshal(params)
	return encodedCall{
		prefix: []byte(`{"jsonrpc":"2.0","id":`),
		suffix: []byte(`,"method":"` + opts.Method + `","params":` + string(p) + `}`),
	}
}

func modernMeta(version string) map[string]any {
	return map[string]any{
		metaProtocolVersion:    version,
		metaClientCapabilities: map[string]any{},
		metaClientInfo:         map[string]string{"name": "toolbus-bench", "version": "1"},
	}
}

// newWorkers makes one worker per unit of concurrency; worker i uses
// session i mod len(sessions). Workers keep their connection (raw client)
// and learned response template across phases.
func (c *caller) newWorkers(sessions []*session, call encodedCall, expect *string) []*worker {
	ws := make([]*worker, c.opts.Concurrency)
	for i := range ws {
		s := sessions[i%len(sessions)]
		w := &worker{c: c, s: s, call: call, expect: expect, id: int64(i) << 32}
		if c.opts.Client == ClientRaw {
			addr := c.url.Host
			if c.url.Port() == "" {
				addr = net.JoinHostPort(c.url.Hostname(), "80")
			}
			w.raw = &rawConn{addr: addr, timeout: c.opts.CallTimeout}
			w.rawHead = s.rawHead
		}
		ws[i] = w
	}
	return ws
}

func closeWorkers(ws []*worker) {
	for _, w := range ws {
		if w.raw != nil {
			w.raw.close()
		}
	}
}

// phase runs the workers until calls calls were made (calls > 0) or d has
// passed. With res nil nothing is recorded (warm-up).
func (c *caller) phase(ctx context.Context, workers []*worker, calls int, d time.Duration, res *Result) {
	for _, w := range workers {
		w.hist = new(histogram)
		w.cycle = new(histogram)
		w.errs = errorTally{max: c.opts.MaxErrorSamples}
		w.fullChecks = 0
	}
	drive(ctx, len(workers), calls, d, c.opts.Rate, func(i int, due time.Time) {
		workers[i].due = due
		workers[i].callOnce(ctx)
	})
	if res == nil {
		return
	}
	res.hist = new(histogram)
	res.cycle = new(histogram)
	res.errs = errorTally{max: c.opts.MaxErrorSamples}
	for _, w := range workers {
		res.hist.merge(w.hist)
		res.cycle.merge(w.cycle)
		res.errs.merge(&w.errs)
		res.FullChecks += w.fullChecks
	}
}

// checkRate refuses a LoadOptions.Rate that cannot pace anything.
func checkRate(r float64) error {
	if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return errors.New("bench: Rate must be a finite number >= 0")
	}
	return nil
}

// drive runs n goroutines, each calling call(i, due) one call after
// another, until calls calls were made in all (calls > 0) or d has passed,
// and waits for them. With rate > 0 goroutine i makes its calls at the
// times due, n/rate apart (offset by i/rate), sleeping until each; behind
// schedule it calls at once and due stays the time the call was due. Calls
// due before d has passed but not made by then are not made (the shortfall
// shows in calls/s against the rate). With rate 0 due is zero.
func drive(ctx context.Context, n, calls int, d time.Duration, rate float64, call func(i int, due time.Time)) {
	var (
		issued   atomic.Int64
		start    = time.Now()
		deadline = start.Add(d)
		wg       sync.WaitGroup
	)
	var period time.Duration
	if rate > 0 {
		period = time.Duration(float64(n) / rate * float64(time.Second))
	}
	for i := range n {
		wg.Go(func() {
			var due time.Time
			var sleep *time.Timer
			if period > 0 {
				due = start.Add(period * time.Duration(i) / time.Duration(n))
				sleep = time.NewTimer(time.Hour)
				defer sleep.Stop()
			}
			for ctx.Err() == nil {
				if calls > 0 {
					if issued.Add(1) > int64(calls) {
						break
					}
				} else if !time.Now().Before(deadline) || !due.IsZero() && !due.Before(deadline) {
					break
				}
				if wait := time.Until(due); period > 0 && wait > 0 {
					sleep.Reset(wait)
					select {
					case <-sleep.C:
					case <-ctx.Done():
						return
					}
				}
				call(i, due)
				if period > 0 {
					due = due.Add(period)
				}
			}
		})
	}
	wg.Wait()
}

// worker makes calls one after another on one session.
type worker struct {
	c      *caller
	s      *session
	call   encodedCall
	expect *string
	id     int64
	buf    bytes.Buffer
	idBuf  []byte
	hist   *histogram
	errs   errorTally

	tmpl       respTemplate
	fullChecks int64 // responses decoded and checked in full

	raw     *rawConn // nil with ClientNetHTTP
	rawHead []byte
	body    []byte // request body, reused by the raw client

	due   time.Time     // when the current call was due (LoadOptions.Rate); zero: now
	cycle *histogram    // Cold on a session-based version: whole cycles
	hold  bool          // see ok
	held  time.Duration // the held call's latency; -1: none succeeded
}

func (w *worker) callOnce(ctx context.Context) {
	w.id++
	w.idBuf = appendID(w.idBuf[:0], w.id)
	if w.c.opts.Cold && !isModern(w.c.opts.ProtocolVersion) && w.c.measured.Load() {
		w.callCold(ctx)
		return
	}
	w.callOn(ctx, w.c.contextPath())
}

// callOn makes one call on w's session, to path when it is not "".
func (w *worker) callOn(ctx context.Context, path string) {
	if w.raw != nil {
		w.callRaw(ctx, path)
		return
	}
	body := make([]byte, 0, len(w.call.prefix)+len(w.idBuf)+len(w.call.suffix))
	body = append(append(append(body, w.call.prefix...), w.idBuf...), w.call.suffix...)
	req := w.s.request(ctx, body)
	if path != "" {
		u := *req.URL
		u.Path, u.RawPath = path, ""
		req.URL = &u
	}

	start := callStart(w.due)
	resp, err := w.c.client.Do(req)
	if err != nil {
		w.errs.add(err)
		return
	}
	w.buf.Reset()
	_, err = w.buf.ReadFrom(resp.Body)
	resp.Body.Close()
	lat := time.Since(start)
	if err != nil {
		w.errs.add(fmt.Errorf("read body: %w", err))
		return
	}
	if resp.StatusCode != http.StatusOK {
		w.errs.add(fmt.Errorf("%w %d: %.200s", ErrHTTPStatus, resp.StatusCode, bytes.TrimSpace(w.buf.Bytes())))
		return
	}
	w.check(resp.Header.Get("Content-Type"), lat)
}

// callStart is the time a call's latency counts from: due, when the call
// is paced (LoadOptions.Rate) and late, else now.
func callStart(due time.Time) time.Time {
	now := time.Now()
	if !due.IsZero() && due.Before(now) {
		return due
	}
	return now
}

// check checks the response body in w.buf and records the call.
func (w *worker) check(contentType string, lat time.Duration) {
	sse := isEventStream(contentType)
	body := w.buf.Bytes()
	if w.tmpl.matches(sse, body, w.idBuf) {
		w.ok(lat)
		return
	}
	w.fullChecks++
	r, err := findResponse(contentType, body, w.idBuf)
	if err == nil {
		if w.c.opts.Method == MethodToolsList {
			err = checkList(r, w.c.opts.MinTools)
		} else {
			err = checkCall(r, w.expect)
		}
	}
	if err != nil {
		w.errs.add(err)
		return
	}
	w.tmpl.learn(sse, body, w.idBuf)
	w.ok(lat)
}

func (w *worker) callRaw(ctx context.Context, path string) {
	w.body = append(append(append(w.body[:0], w.call.prefix...), w.idBuf...), w.call.suffix...)
	head := w.rawHead
	if path != "" {
		head = rawHeadPath(w.s, path)
	}
	start := callStart(w.due)
	resp, err := w.raw.do(ctx, head, w.body, &w.buf)
	lat := time.Since(start)
	if err != nil {
		w.errs.add(err)
		return
	}
	if resp.status != 200 {
		w.errs.add(fmt.Errorf("%w %d: %.200s", ErrHTTPStatus, resp.status, bytes.TrimSpace(w.buf.Bytes())))
		return
	}
	w.check(string(resp.contentType), lat)
}

// errorTally counts failed calls by kind and keeps a few distinct messages.
type errorTally struct {
	n       int64
	kinds   map[string]int64
	samples []string
	max     int
}

func (e *errorTally) add(err error) {
	e.n++
	if e.kinds == nil {
		e.kinds = make(map[string]int64)
	}
	e.kinds[errorKind(err)]++
	msg := err.Error()
	if len(e.samples) < e.max && !slices.Contains(e.samples, msg) {
		e.samples = append(e.samples, msg)
	}
}

func (e *errorTally) merge(o *errorTally) {
	e.n += o.n
	for k, v := range o.kinds {
		if e.kinds == nil {
			e.kinds = make(map[string]int64)
		}
		e.kinds[k] += v
	}
	for _, s := range o.samples {
		if len(e.samples) < e.max && !slices.Contains(e.samples, s) {
			e.samples = append(e.samples, s)
		}
	}
}

func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrHTTPStatus, "http_status"}, {ErrNoResponse, "no_response"}, {ErrBadResponse, "bad_response"},
		{ErrRPC, "jsonrpc_error"}, {ErrToolError, "tool_error"}, {ErrWrongResult, "wrong_result"},
		{context.DeadlineExceeded, "timeout"}, {context.Canceled, "canceled"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "transport"
}

// drain reads and closes a body so its connection can be reused.
func drain(resp *http.Response) []byte {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return b
}
