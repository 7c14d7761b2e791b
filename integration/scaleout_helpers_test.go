package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The identities of the scale-out tests: every replica logs in as one
// platform identity, every worker of the pool as one agent identity (so
// the workers are instances of one agent, which share its requests); each
// has its own client ID.
const (
	soGatewayUser   = "gw-pool"
	soWorkerUser    = "pool"
	soPassword      = "scaleout-password-1"
	soSessionSecret = "scale-out-session-secret-0123456789"
)

// scaleOut is a shared PostgreSQL store, a Mosquitto configured from
// `toolbus acl export` of that store, gateway replicas in external mode and
// a pool of agent workers: instances of one agent, sharing its requests.
type scaleOut struct {
	storeURL   string
	mosq       *testenv.Mosquitto
	nats       *testenv.NATSCluster // instead of mosq: a NATS cluster
	brokerAddr string               // where workers connect: Mosquitto, or an embedded broker
	embedded   bool                 // the first replica runs the broker (embedded), the others use it
	direct     bool                 // workers connect without the proxy (benchmarks): kill does nothing
	replicas   []*gwEnv
	workers    []*poolWorker
}

// startScaleOut makes the store and the broker; add replicas and workers
// with replica and worker.
func startScaleOut(t testing.TB) *scaleOut {
	t.Helper()
	testenv.MosquittoBinary(t) // skip (or install) before doing anything else
	so := newScaleOutStore(t)
	so.mosq = testenv.StartMosquitto(t, testenv.MosquittoOptions{Dir: so.export(t, "mosquitto")})
	so.brokerAddr = so.mosq.Addr
	return so
}

// startEmbeddedScaleOut makes the store; the first replica will run the
// embedded broker, and the others and the workers use it.
func startEmbeddedScaleOut(t testing.TB) *scaleOut {
	t.Helper()
	so := newScaleOutStore(t)
	so.embedded = true
	return so
}

// newScaleOutStore makes the shared PostgreSQL store with the identities
// of the scale-out tests: the gateways', the pool's and solo's.
func newScaleOutStore(t testing.TB) *scaleOut {
	t.Helper()
	pg := testenv.StartPostgres(t)
	so := &scaleOut{storeURL: pg.CreateDatabase(t)}
	ctx := testCtx(t, 30*time.Second)
	st, err := store.OpenURL(ctx, so.storeURL, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []struct {
		name string
		role acl.Role
	}{{soGatewayUser, acl.RolePlatform}, {soWorkerUser, acl.RoleExpertAgent}, {soSoloUser, acl.RoleExpertAgent}} {
		if _, err := st.AddIdentity(ctx, id.name, id.role, []byte(soPassword)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return so
}

// export runs `toolbus acl export --format format` of the store, as an
// operator does, into a new directory, and returns it.
func (so *scaleOut) export(t testing.TB, format string) string {
	t.Helper()
	files := t.TempDir()
	out, err := exec.CommandContext(testCtx(t, 30*time.Second), bins.toolbus, "acl", "export", "--format", format,
		"--store-url", so.storeURL, "--out", files).CombinedOutput()
	if err != nil {
		t.Fatalf("acl export: %v\n%s", err, out)
	}
	return files
}

// replica starts one more gateway replica: its own platform ID (and so its
// own MQTT client ID), the shared store, broker and session secret.
func (so *scaleOut) replica(t testing.TB, cfg server.Config) *gwEnv {
	t.Helper()
	cfg.PlatformID = fmt.Sprintf("gw-%c", 'a'+len(so.replicas))
	cfg.StoreURL = so.storeURL
	cfg.SessionSecret = soSessionSecret
	switch {
	case so.embedded && len(so.replicas) == 0: // runs the broker
	case so.embedded:
		cfg.BrokerURL = "tcp://" + so.brokerAddr
	case cfg.BrokerURL == "":
		cfg.BrokerURL = so.mosq.URL
	}
	if cfg.BrokerURL != "" {
		cfg.BrokerUsername, cfg.BrokerPassword = soGatewayUser, soPassword
	}
	srv := startServer(t, cfg)
	if so.embedded && len(so.replicas) == 0 {
		so.brokerAddr = srv.MQTTAddr().String()
	}
	g := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	so.replicas = append(so.replicas, g)
	return g
}

// poolWorker is one instance of the pool's agent, in this process.
type poolWorker struct {
	clientID string
	calls    atomic.Int64 // echo calls it served
	held     chan string  // hold calls it started, by text
	kill     func()       // drops its connection (as a crash would): the broker sends its Will
	stop     func()
}

// worker starts one more worker, connected through a proxy that can drop
// its connection, and waits until every replica sees it online. Its tools:
// echo (the text back) and hold (waits for the call's end when holds is
// true, else answers "passed").
func (so *scaleOut) worker(t testing.TB, holds bool) *poolWorker {
	t.Helper()
	return so.workerWith(t, workerSpec{holds: holds})
}

// workerSpec says which worker workerWith starts.
type workerSpec struct {
	user      string // its agent; "" = soWorkerUser
	brokerURL string // where it connects; "" = brokerAddr, through a proxy unless direct
	holds     bool
}

func (so *scaleOut) workerWith(t testing.TB, spec workerSpec) *poolWorker {
	t.Helper()
	user := cmp.Or(spec.user, soWorkerUser)
	holds := spec.holds
	w := &poolWorker{clientID: fmt.Sprintf("%s-%d", user, len(so.workers)+1), held: make(chan string, 16)}
	brokerURL := spec.brokerURL
	w.kill = func() {}
	if brokerURL == "" {
		brokerURL = "tcp://" + so.brokerAddr
		if !so.direct {
			proxy := testenv.StartStallProxy(t, so.brokerAddr)
			w.kill, brokerURL = proxy.Close, proxy.URL()
		}
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: brokerURL, Username: user, Password: soPassword,
		ClientID: w.clientID, Name: user, Concurrency: 64,
		Exclusive:      so.nats != nil, // NATS has no $share; the gateways address instances
		ConnectTimeout: 5 * time.Second,
		Logger:         testenv.LoggerAt(t, "agent", logrus.WarnLevel).WithField("worker", w.clientID),
	})
	yes := true
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	textArg := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "echo",
			Description: "Returns its text.",
			InputSchema: textArg,
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			var p struct{ Text string }
			if err := req.Bind(&p); err != nil {
				return nil, err
			}
			w.calls.Add(1)
			return tbmcp.TextResult(p.Text), nil
		},
	}))
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "hold",
			Description: "Holds the call on a holding worker.",
			InputSchema: textArg,
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			var p struct{ Text string }
			if err := req.Bind(&p); err != nil {
				return nil, err
			}
			if !holds {
				return tbmcp.TextResult("passed"), nil
			}
			w.held <- p.Text
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}))
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("worker %s: %v", w.clientID, err)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatalf("worker %s not ready", w.clientID)
	}
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done: // a killed worker's Run may end with its lost connection: not the test's point
			case <-time.After(20 * time.Second):
				t.Errorf("worker %s did not stop", w.clientID)
			}
		})
	}
	t.Cleanup(w.stop)
	for _, g := range so.replicas {
		poll(t, 10*time.Second, w.clientID+" online at "+g.srv.PlatformID(), func() bool { return agentOnline(g.srv, w.clientID) })
	}
	so.workers = append(so.workers, w)
	return w
}

// alternating is an http.RoundTripper that sends each request of one MCP
// session to the next replica in turn (the same URL path on another host),
// as a load balancer without stickiness would.
type alternating struct {
	token string
	hosts []string // host:port of the replicas
	n     atomic.Uint64
	per   []atomic.Int64 // requests sent to each replica
}

func newAlternating(token string, replicas []*gwEnv) *alternating {
	a := &alternating{token: token, per: make([]atomic.Int64, len(replicas))}
	for _, g := range replicas {
		a.hosts = append(a.hosts, strings.TrimPrefix(g.base, "http://"))
	}
	return a
}

func (a *alternating) RoundTrip(r *http.Request) (*http.Response, error) {
	i := int(a.n.Add(1)-1) % len(a.hosts)
	a.per[i].Add(1)
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = a.hosts[i], a.hosts[i]
	r.Header.Set("Authorization", "Bearer "+a.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectAlternating opens an MCP session (go-sdk client, legacy-era
// protocol with sessions) whose requests alternate between the replicas.
func connectAlternating(ctx context.Context, tr *alternating, path string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-scaleout", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   "http://" + tr.hosts[0] + path,
		HTTPClient: &http.Client{Transport: tr},
		// No standalone GET stream: it would pin one replica for the
		// session's server-to-client messages, which these calls do not use.
		DisableStandaloneSSE: true,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// echoFailure says what is wrong with an echo call's outcome: "" when it
// answered want, and nothing else, to its caller.
func echoFailure(res *mcp.CallToolResult, err error, want string) string {
	switch {
	case err != nil:
		return "protocol error: " + err.Error()
	case res.IsError || len(res.Content) != 1:
		return fmt.Sprintf("result %+v", res)
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	switch {
	case !ok:
		return fmt.Sprintf("content %T, not text", res.Content[0])
	case text.Text != want:
		return fmt.Sprintf("answered %q (someone else's answer)", text.Text)
	}
	return ""
}

// echoAlternating opens sessions MCP sessions through tr (their requests
// alternating between the replicas), clients of them at a time, and in each
// makes callsPerSession echo calls of tool(session, call), each with its
// own text. It returns how many were answered with their own text, and up
// to 10 failures.
func echoAlternating(ctx context.Context, tr *alternating, sessions, callsPerSession, clients int, tool func(s, c int) string) (answered int, failures []string) {
	var mu sync.Mutex
	fail := func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(f, args...))
		}
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for s := range jobs {
				cs, err := connectAlternating(ctx, tr, "/api/v1/mcp")
				if err != nil {
					fail("session %d: connect: %v", s, err)
					continue
				}
				for c := range callsPerSession {
					want := fmt.Sprintf("session %d call %d", s, c)
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool(s, c), Arguments: map[string]any{"text": want}})
					if why := echoFailure(res, err, want); why != "" {
						fail("%s: %s", want, why)
						continue
					}
					mu.Lock()
					answered++
					mu.Unlock()
				}
				_ = cs.Close()
			}
		})
	}
	for s := range sessions {
		jobs <- s
	}
	close(jobs)
	wg.Wait()
	return answered, failures
}
