package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The second agent of the distributed tests, beside the pool: one instance.
const soSoloUser = "solo"

// startNATSScaleOut makes the shared store (identities: the gateways', the
// pool's and solo's) and a three-node NATS cluster (JetStream, MQTT on
// each node) that knows those identities. Add replicas and workers with
// replica and workerWith, naming their nodes with nodeURLs.
func startNATSScaleOut(t testing.TB) *scaleOut {
	t.Helper()
	testenv.NATSBinary(t) // build (or find) it before anything else starts
	so := newScaleOutStore(t)
	so.nats = testenv.StartNATSCluster(t, testenv.NATSOptions{
		Accounts: filepath.Join(so.export(t, "nats"), acl.NATSConfName),
		// A node's loss stalls every node's MQTT until the cluster has
		// elected new stream leaders, unless the MQTT streams have
		// replicas on the surviving nodes (docs/distributed.md).
		MQTT: []string{"stream_replicas: 3"},
	})
	return so
}

// nodeURLs is the cluster's MQTT URLs, comma-separated, starting with the
// given nodes (0-based) and then the others: a client's preferred node
// first and the rest to fail over to.
func (so *scaleOut) nodeURLs(first ...int) string {
	var urls []string
	seen := map[int]bool{}
	for _, i := range first {
		urls, seen[i] = append(urls, so.nats.Nodes[i].MQTTURL), true
	}
	for i, n := range so.nats.Nodes {
		if !seen[i] {
			urls = append(urls, n.MQTTURL)
		}
	}
	return strings.Join(urls, ",")
}

// natsReplica starts a replica that prefers node first, addressing agent
// instances (NATS has no shared subscriptions).
func (so *scaleOut) natsReplica(t testing.TB, first int, cfg server.Config) *gwEnv {
	t.Helper()
	cfg.BrokerURL = so.nodeURLs(first)
	cfg.AddressAgentInstances = true
	cfg.OneReplySubscription = true
	return so.replica(t, cfg)
}

// TestReplicasSessionsAndCalls: two gateway replicas and two agents (one
// a pool of two) on each broker: a three-node NATS cluster (the replicas on
// different nodes, the agents on the third), Mosquitto, and the embedded
// broker of the first replica. 1000 MCP sessions per replica open and each
// makes a call, then 2000 calls over 200 sessions whose requests alternate
// between the replicas are each answered once, correctly, to their caller.
func TestReplicasSessionsAndCalls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *scaleOut
	}{
		{"embedded", func(t *testing.T) *scaleOut { return startEmbeddedScaleOut(t) }},
		{"mosquitto", func(t *testing.T) *scaleOut { return startScaleOut(t) }},
		{"nats", func(t *testing.T) *scaleOut { return startNATSScaleOut(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			so := tc.start(t)
			if so.nats != nil {
				so.natsReplica(t, 0, server.Config{})
				so.natsReplica(t, 1, server.Config{})
				so.workerWith(t, workerSpec{brokerURL: so.nodeURLs(2)})
				so.workerWith(t, workerSpec{brokerURL: so.nodeURLs(2)})
				so.workerWith(t, workerSpec{user: soSoloUser, brokerURL: so.nodeURLs(2)})
			} else {
				so.replica(t, server.Config{})
				so.replica(t, server.Config{})
				so.worker(t, false)
				so.worker(t, false)
				so.workerWith(t, workerSpec{user: soSoloUser})
			}
			sessionsAndCalls(t, so)
		})
	}
}

// sessionsAndCalls is TestReplicasSessionsAndCalls on one broker.
func sessionsAndCalls(t *testing.T, so *scaleOut) {
	const (
		sessionsPerReplica = 1000
		sessions           = 200
		callsPerSession    = 10
		clients            = 16
	)
	a, workers := so.replicas[0], so.workers
	tok := a.token(t, store.TokenSpec{UserID: "alice"})
	ctx := testCtx(t, 5*time.Minute)
	served := func() (n int64) {
		for _, w := range workers {
			n += w.calls.Load()
		}
		return n
	}

	var (
		mu       sync.Mutex
		failures []string
	)
	fail := func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(f, args...))
		}
	}
	check := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, f := range failures {
			t.Error(f)
		}
		if len(failures) > 0 {
			t.FailNow()
		}
	}
	// call makes one call of tool on cs and checks it was answered with its
	// own text.
	call := func(cs *mcp.ClientSession, tool, want string) bool {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": want}})
		if why := echoFailure(res, err, want); why != "" {
			fail("%s: %s", want, why)
			return false
		}
		return true
	}
	// Both agents serve echo: one is listed as echo, the other qualified,
	// and both qualified names call their own agent's.
	tools := []string{soWorkerUser + ".echo", soSoloUser + ".echo"}

	// 1000 sessions per replica, all open at once, each with its own reply
	// subscription on that replica's node.
	for _, g := range so.replicas {
		before := served()
		open := make([]*mcp.ClientSession, sessionsPerReplica)
		var wg sync.WaitGroup
		jobs := make(chan int)
		for range clients {
			wg.Go(func() {
				for i := range jobs {
					cs, err := connectAlternating(ctx, newAlternating(tok, []*gwEnv{g}), "/api/v1/mcp")
					if err != nil {
						fail("replica %s session %d: connect: %v", g.srv.PlatformID(), i, err)
						continue
					}
					open[i] = cs
					call(cs, tools[i%2], fmt.Sprintf("%s session %d", g.srv.PlatformID(), i))
				}
			})
		}
		for i := range sessionsPerReplica {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		check()
		if n := served() - before; n != sessionsPerReplica {
			t.Fatalf("replica %s: agents served %d calls for %d sessions", g.srv.PlatformID(), n, sessionsPerReplica)
		}
		if n := g.srv.Requester().Stats().Subscribes; n < sessionsPerReplica {
			t.Fatalf("replica %s holds %d reply subscriptions, want one per session (%d)", g.srv.PlatformID(), n, sessionsPerReplica)
		}
		for _, cs := range open {
			_ = cs.Close()
		}
		t.Logf("replica %s: %d sessions open at once, each answered", g.srv.PlatformID(), sessionsPerReplica)
	}

	// 2000 calls over 200 sessions, each session's requests alternating
	// between the replicas.
	before := served()
	tr := newAlternating(tok, so.replicas)
	answered, failures := echoAlternating(ctx, tr, sessions, callsPerSession, clients, func(s, c int) string { return tools[(s+c)%2] })
	for _, f := range failures {
		t.Error(f)
	}
	if want := sessions * callsPerSession; answered != want || served()-before != int64(want) {
		t.Fatalf("%d calls answered correctly and %d served, want %d of each", answered, served()-before, want)
	}
	for _, w := range workers {
		if w.calls.Load() == 0 {
			t.Errorf("worker %s served no call", w.clientID)
		}
	}
	for i, g := range so.replicas {
		if tr.per[i].Load() < sessions*callsPerSession/3 {
			t.Errorf("replica %s got %d requests: the sessions did not alternate", g.srv.PlatformID(), tr.per[i].Load())
		}
	}
}

// TestNATSClusterNodeKilled: under load, kill -9 the node that one gateway
// replica and one instance of the pool are on. No call waits for its
// deadline: each succeeds, or fails within seconds with a tool error that
// says why. The replica fails over to another node, the surviving
// instance takes the pool's calls, and from 15 s after the kill every new
// call succeeds. The audit log holds each call once. The node comes back:
// nothing is answered twice.
func TestNATSClusterNodeKilled(t *testing.T) {
	const (
		callTimeout = 20 * time.Second
		clients     = 8
		settle      = 15 * time.Second // after the kill, every new call succeeds
		user        = "kim"
	)
	so := startNATSScaleOut(t)
	audit := server.AuditConfig{FlushInterval: 100 * time.Millisecond}
	a := so.natsReplica(t, 0, server.Config{CallTimeout: callTimeout, Audit: audit})
	so.natsReplica(t, 1, server.Config{CallTimeout: callTimeout, Audit: audit})
	doomed := so.workerWith(t, workerSpec{brokerURL: so.nodeURLs(0, 2)})
	survivor := so.workerWith(t, workerSpec{brokerURL: so.nodeURLs(2)})
	solo := so.workerWith(t, workerSpec{user: soSoloUser, brokerURL: so.nodeURLs(2)})
	tok := a.token(t, store.TokenSpec{UserID: user})
	ctx := testCtx(t, 3*time.Minute)
	tools := []string{soWorkerUser + ".echo", soSoloUser + ".echo"}

	type outcome struct {
		start time.Time
		took  time.Duration
		tool  string
		ok    bool
		why   string
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		killedAt time.Time
	)
	stop := make(chan struct{})
	tr := newAlternating(tok, so.replicas)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			cs, err := connectAlternating(ctx, tr, "/api/v1/mcp")
			if err != nil {
				t.Errorf("client %d: connect: %v", c, err)
				return
			}
			defer cs.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tool, want := tools[(c+i)%2], fmt.Sprintf("client %d call %d", c, i)
				start := time.Now()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": want}})
				o := outcome{start: start, took: time.Since(start), tool: tool}
				if err == nil && res.IsError {
					o.why = "tool error: " + textOf(t, res)
				} else {
					o.why = echoFailure(res, err, want)
				}
				o.ok = o.why == ""
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes)
	}
	poll(t, 30*time.Second, "calls before the kill", func() bool { return count() >= 200 })
	doomedBefore, survivorBefore := doomed.calls.Load(), survivor.calls.Load()
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	so.nats.Nodes[0].Kill()
	t.Logf("killed %s at %s, after %d calls", so.nats.Nodes[0].Name, killedAt.Format("15:04:05.000"), count())
	poll(t, settle+30*time.Second, "calls after the settling time", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			if o.start.After(killedAt.Add(settle)) {
				n++
			}
		}
		return n >= 200
	})
	close(stop)
	wg.Wait()

	var failed, worst int
	var worstTook time.Duration
	reasons := map[string]int{} // failures by the first words of their text
	for i, o := range outcomes {
		if o.took > worstTook {
			worst, worstTook = i, o.took
		}
		if o.ok {
			continue
		}
		failed++
		reasons[o.why[:min(len(o.why), 70)]]++
		switch {
		case o.took >= callTimeout-2*time.Second:
			t.Errorf("a %s call started %v after the kill waited %v, for its deadline: %s", o.tool, o.start.Sub(killedAt).Round(time.Millisecond), o.took, o.why)
		case o.start.After(killedAt.Add(settle)):
			t.Errorf("a %s call started %v after the kill failed: %s", o.tool, o.start.Sub(killedAt).Round(time.Millisecond), o.why)
		case !strings.HasPrefix(o.why, "tool error: "):
			t.Errorf("a %s call failed without a tool error: %s", o.tool, o.why)
		default:
			if failed <= 5 {
				t.Logf("a %s call started %v after the kill failed after %v: %s", o.tool, o.start.Sub(killedAt).Round(time.Millisecond), o.took.Round(time.Millisecond), o.why)
			}
		}
	}
	t.Logf("failures by reason: %v", reasons)
	t.Logf("%d calls, %d failed; worst took %v (started %v after the kill)", len(outcomes), failed, worstTook.Round(time.Millisecond), outcomes[worst].start.Sub(killedAt).Round(time.Millisecond))
	t.Logf("after the kill: the doomed instance served %d calls, the survivor %d, solo %d in all", doomed.calls.Load()-doomedBefore, survivor.calls.Load()-survivorBefore, solo.calls.Load())
	if survivor.calls.Load() == survivorBefore {
		t.Error("the surviving pool instance served no call after the kill")
	}

	// The audit log holds each call once: those answered and those failed.
	st, err := store.OpenURL(ctx, so.storeURL, store.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	q := store.AuditQuery{User: user, Kind: store.AuditToolCall}
	if got := waitAudit(t, st, "an audit record per call", q, len(outcomes)); len(got) != len(outcomes) {
		t.Errorf("audit log holds %d tool calls of %s, want %d", len(got), user, len(outcomes))
	}

	// The node comes back: every call is answered once, by one instance.
	so.nats.Nodes[0].Restart(t)
	cs, err := connectAlternating(ctx, tr, "/api/v1/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	before := doomed.calls.Load() + survivor.calls.Load() + solo.calls.Load()
	for i := range 100 {
		want := fmt.Sprintf("after the restart %d", i)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tools[i%2], Arguments: map[string]any{"text": want}})
		if err != nil || res.IsError || textOf(t, res) != want {
			t.Fatalf("call %d after the node came back: %+v %v", i, res, err)
		}
	}
	if n := doomed.calls.Load() + survivor.calls.Load() + solo.calls.Load() - before; n != 100 {
		t.Fatalf("agents served %d calls for 100 after the node came back", n)
	}
}

// TestNATSClusterPermissions: the users `toolbus acl export --format nats`
// writes log in with their store passwords only, and NATS holds each to
// its role: an agent reads only its own requests and answers only as
// itself, a gateway reads replies but not requests.
func TestNATSClusterPermissions(t *testing.T) {
	so := startNATSScaleOut(t)
	url := so.nats.Nodes[0].MQTTURL
	if _, err := dialMQTT(t, url, soSoloUser, "wrong password", "solo-x", nil); err == nil {
		t.Fatal("a wrong password logged in")
	}
	inbox := make(chan paho.Message, 16)
	gw, err := dialMQTT(t, url, soGatewayUser, soPassword, "gw-x", inbox)
	if err != nil {
		t.Fatal(err)
	}
	solo, err := dialMQTT(t, url, soSoloUser, soPassword, "solo-x", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who     string
		c       paho.Client
		filter  string
		granted bool
	}{
		{"solo", solo, "ff/v2/mcp/solo/solo-x/+/+/+/+/+/req", true},
		{"solo", solo, "$share/solo/ff/v2/mcp/solo/_/+/+/+/+/+/req", true},
		{"solo", solo, "ff/v2/mcp/pool/+/+/+/+/+/+/req", false},
		{"solo", solo, "ff/v2/mcp/+/+/gw/+/+/+/+/res", false},
		{"gateway", gw, "ff/v2/mcp/+/+/gw/+/+/+/+/res", true},
		{"gateway", gw, "ff/v2/mcp/+/+/status", true},
		{"gateway", gw, "ff/v2/mcp/pool/+/+/+/+/+/+/req", false},
	} {
		tok := tc.c.Subscribe(tc.filter, 0, nil)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("%s subscribe %s: %v", tc.who, tc.filter, tok.Error())
		}
		code := tok.(*paho.SubscribeToken).Result()[strings.TrimPrefix(tc.filter, "$share/solo/")]
		if granted := code < 0x80; granted != tc.granted {
			t.Errorf("%s subscribe %s: SUBACK %#x, want granted=%v", tc.who, tc.filter, code, tc.granted)
		}
	}
	// A reply forged as another agent does not reach the gateway; solo's
	// own, sent after it, does.
	forged := "ff/v2/mcp/pool/pool-1/gw/u/s/_/_/res"
	own := "ff/v2/mcp/solo/solo-x/gw/u/s/_/_/res"
	for _, topic := range []string{forged, own} {
		if tok := solo.Publish(topic, 1, false, topic); !tok.WaitTimeout(10 * time.Second) {
			t.Fatalf("publish %s: no PUBACK", topic)
		}
	}
	select {
	case m := <-inbox:
		if m.Topic() != own {
			t.Fatalf("the gateway received %s, want only solo's own reply", m.Topic())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("solo's own reply never reached the gateway")
	}
}

// TestNATSClusterStartTogether: a gateway and an agent started at the same
// moment on different nodes (the agent's presence published while the
// gateway subscribes to presence) see each other: the gateway does not keep
// a stale status until the agent's next repeat, 30 s later.
func TestNATSClusterStartTogether(t *testing.T) {
	so := startNATSScaleOut(t)
	for round := range 6 {
		var wg sync.WaitGroup
		var g *server.Server
		wg.Go(func() {
			g = startServer(t, server.Config{
				PlatformID: fmt.Sprintf("together-%d", round), StoreURL: so.storeURL, SessionSecret: soSessionSecret,
				BrokerURL: so.nodeURLs(round % 2), BrokerUsername: soGatewayUser, BrokerPassword: soPassword,
				AddressAgentInstances: true, OneReplySubscription: true,
			})
		})
		var w *poolWorker
		wg.Go(func() { w = so.workerWith(t, workerSpec{user: soSoloUser, brokerURL: so.nodeURLs(2)}) })
		wg.Wait()
		poll(t, 15*time.Second, fmt.Sprintf("round %d: the agent online at the gateway started with it", round), func() bool {
			return agentOnline(g, w.clientID)
		})
	}
}
