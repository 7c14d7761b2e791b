package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/contract"
)

// MQTTFloorScenario names the raw MQTT request/response scenario.
const MQTTFloorScenario = "mqtt-floor"

// MQTTFloorOptions configure a raw MQTT request/response run: the floor of
// the gateway's expert-agent path. A requester in this process publishes
// tools/call envelopes on context request topics, the way the gateway does,
// and an expert agent that is connected to the same broker answers on the
// response topics; no HTTP is involved. The zero value of every field but
// BrokerURL has a documented default.
type MQTTFloorOptions struct {
	// BrokerURL is the broker, tcp://host:port (required).
	BrokerURL string
	// Username and Password log in; the identity needs the platform role
	// (publish .../req, subscribe to exact .../res topics).
	Username, Password string
	// Agent is the expert agent's name on the bus (its MQTT username) the
	// requests go to; "" means "bench-agent", scripts/bench.sh's agent.
	Agent string
	// PlatformID and UserID fill the first two context levels of the
	// topics; "" means "benchfloor" and "bench". The session level is
	// unique per run.
	PlatformID, UserID string
	// QoS0 publishes and subscribes at QoS 0; the default is QoS 1, what the
	// gateway's bus and the expert agents use.
	QoS0 bool
	// Client is the requester: "raw" (the default), a lean MQTT 3.1.1
	// client of one TCP connection and one reader goroutine (rawMQTT), or
	// "paho", paho.mqtt.golang, the client the gateway uses with an external
	// broker.
	Client string
	// Load holds what the HTTP runs share: Sessions is the number of
	// contexts (one /res subscription each), Concurrency the requests in
	// flight (worker i uses context i mod Sessions), Calls or Duration,
	// Warmup, PayloadBytes, Tool (must echo {"text"}), CallTimeout,
	// ServerPIDs (the broker's and the agent's processes), MaxErrorSamples
	// and Logger, with LoadOptions' defaults. URL, Token, Method,
	// ProtocolVersion, Client, Cold and Contexts are not used.
	Load LoadOptions
}

// CheckMQTTFloorClient reports whether client names a requester of the
// MQTT floor (MQTTFloorOptions.Client): "raw" or "paho".
func CheckMQTTFloorClient(client string) error {
	if client != "raw" && client != "paho" {
		return fmt.Errorf("MQTT floor client %q: want raw or paho", client)
	}
	return nil
}

// RunMQTTFloor measures o and returns a Result like Run's (Client "raw" or
// "paho", Mode "external"). The returned error is only for a run that could
// not start: options it cannot use (no broker URL, an unknown Client), or
// ErrSetup (connect, subscribe); failed calls are counted.
func RunMQTTFloor(ctx context.Context, o MQTTFloorOptions) (*Result, error) {
	if o.BrokerURL == "" {
		return nil, errors.New("bench: MQTT floor without a broker URL")
	}
	if o.Agent == "" {
		o.Agent = "bench-agent"
	}
	if o.PlatformID == "" {
		o.PlatformID = "benchfloor"
	}
	if o.UserID == "" {
		o.UserID = "bench"
	}
	if o.Client == "" {
		o.Client = "raw"
	}
	if err := CheckMQTTFloorClient(o.Client); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := checkRate(o.Load.Rate); err != nil {
		return nil, err
	}
	lo := o.Load
	lo.URL = o.BrokerURL
	lo.Client = o.Client
	lo = lo.withDefaults()
	lo.Method = MethodToolsCall
	lo.Client = o.Client
	qos := byte(1)
	if o.QoS0 {
		qos = 0
	}
	f := &floor{opts: lo, qos: qos, run: randomHex(4), pending: map[string]chan []byte{}}
	if err := f.connect(ctx, o); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	defer f.close()

	text := payloadText(lo.PayloadBytes)
	ctxs := make([]contract.Context, lo.Sessions)
	for i := range ctxs {
		ctxs[i] = contract.Context{PlatformID: o.PlatformID, UserID: o.UserID,
			SessionID: "f" + f.run + "-" + strconv.Itoa(i), EntityType: contract.NoEntity, EntityID: contract.NoEntity}
		if err := f.subscribe(ctx, ctxs[i].ReplyFilter()); err != nil {
			return nil, fmt.Errorf("%w: subscribe %s: %w", ErrSetup, ctxs[i].ReplyFilter(), err)
		}
	}
	workers := make([]*floorWorker, lo.Concurrency)
	for i := range workers {
		workers[i] = newFloorWorker(f, i, ctxs[i%len(ctxs)], o.Agent, text)
	}
	if lo.Warmup > 0 {
		f.phase(ctx, workers, 0, lo.Warmup, nil)
	}
	m := startMeter(lo.ServerPIDs)
	res := &Result{}
	f.phase(ctx, workers, lo.Calls, lo.Duration, res)
	res.fill(lo, m.elapsed())
	res.Tool = lo.Tool
	m.finish(res)
	res.Scenario, res.Mode = MQTTFloorScenario, "external"
	return res, ctx.Err()
}

// floor is the requester side of a floor run: one client (raw or paho),
// one dispatch map from correlation ID to the waiting worker.
type floor struct {
	opts   LoadOptions
	qos    byte
	run    string
	raw    *rawMQTT    // Client "raw"
	client paho.Client // Client "paho"

	mu      sync.Mutex
	pending map[string]chan []byte
}

func (f *floor) connect(ctx context.Context, o MQTTFloorOptions) error {
	clientID := "toolbus-bench-floor-" + f.run
	if o.Client == "raw" {
		c, err := dialRawMQTT(ctx, o.BrokerURL, clientID, o.Username, o.Password, f.opts.CallTimeout, f.dispatch)
		if err != nil {
			return fmt.Errorf("connect %s: %w", o.BrokerURL, err)
		}
		f.raw = c
		return nil
	}
	co := paho.NewClientOptions().
		AddBroker(o.BrokerURL).
		SetClientID(clientID).
		SetUsername(o.Username).
		SetPassword(o.Password).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).
		SetWriteTimeout(f.opts.CallTimeout).
		SetOrderMatters(true). // one delivery goroutine; dispatch never blocks
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { f.dispatch(m.Payload()) })
	f.client = paho.NewClient(co)
	if err := f.wait(ctx, f.client.Connect()); err != nil {
		f.client.Disconnect(0)
		return fmt.Errorf("connect %s: %w", o.BrokerURL, err)
	}
	return nil
}

// subscribe subscribes to a response topic at the run's QoS.
func (f *floor) subscribe(ctx context.Context, topic string) error {
	if f.raw != nil {
		ctx, cancel := context.WithTimeout(ctx, f.opts.CallTimeout)
		defer cancel()
		return f.raw.subscribe(ctx, topic, f.qos)
	}
	return f.wait(ctx, f.client.Subscribe(topic, f.qos, nil))
}

// publish sends a request; the paho token is done once paho has sent it
// (QoS 0) or has its PUBACK (QoS 1). The raw client writes it before it
// returns, and a write error ends the call.
func (f *floor) publish(topic string, payload []byte) (paho.Token, error) {
	if f.raw != nil {
		return doneToken{}, f.raw.publish(topic, f.qos, payload)
	}
	return f.client.Publish(topic, f.qos, false, payload), nil
}

func (f *floor) close() {
	if f.raw != nil {
		f.raw.close()
		return
	}
	f.client.Disconnect(250)
}

// wait waits for tok, bounded by ctx and the call timeout.
func (f *floor) wait(ctx context.Context, tok paho.Token) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.CallTimeout)
	defer cancel()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

var correlationKey = []byte(`"correlationId":"`)

// dispatch hands a reply to the worker waiting for its correlation ID. It
// runs on the client's delivery goroutine: it must not block.
func (f *floor) dispatch(p []byte) {
	i := bytes.Index(p, correlationKey)
	if i < 0 {
		return
	}
	rest := p[i+len(correlationKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return
	}
	f.mu.Lock()
	ch := f.pending[string(rest[:j])]
	f.mu.Unlock()
	if ch != nil {
		select {
		case ch <- p:
		default: // a duplicate answer
		}
	}
}

func (f *floor) phase(ctx context.Context, workers []*floorWorker, calls int, d time.Duration, res *Result) {
	for _, w := range workers {
		w.hist = new(histogram)
		w.errs = errorTally{max: f.opts.MaxErrorSamples}
		w.fullChecks = 0
	}
	drive(ctx, len(workers), calls, d, f.opts.Rate, func(i int, due time.Time) {
		workers[i].due = due
		workers[i].callOnce(ctx)
	})
	if res == nil {
		return
	}
	res.hist = new(histogram)
	res.errs = errorTally{max: f.opts.MaxErrorSamples}
	for _, w := range workers {
		res.hist.merge(w.hist)
		res.errs.merge(&w.errs)
		res.FullChecks += w.fullChecks
	}
}

// floorWorker makes requests one after another in one context.
type floorWorker struct {
	f      *floor
	topic  string
	prefix string // correlation IDs: prefix + sequence
	seq    int64
	expect string
	// An encoded request is head + id + mid + deadline + tail1 + id + tail2.
	head, mid, tail1, tail2 []byte
	reply                   chan []byte
	tmpl                    idTemplate
	hist                    *histogram
	errs                    errorTally
	fullChecks              int64
	due                     time.Time // when the current call was due (LoadOptions.Rate); zero: now
}

func newFloorWorker(f *floor, i int, c contract.Context, agent, text string) *floorWorker {
	caller, _ := json.Marshal(contract.Caller{UserID: c.UserID, Scopes: []string{"tools:list", "tools:call"}})
	params, _ := json.Marshal(map[string]any{"name": f.opts.Tool, "arguments": map[string]string{"text": text}})
	return &floorWorker{
		f: f, topic: c.RequestTopic(agent, contract.AnyInstance), prefix: "f" + f.run + "-" + strconv.Itoa(i) + "-", expect: text,
		head:  []byte(`{"v":2,"correlationId":"`),
		mid:   []byte(`","deadline":`),
		tail1: []byte(`,"caller":` + string(caller) + `,"message":{"jsonrpc":"2.0","id":"`),
		tail2: []byte(`","method":"tools/call","params":` + string(params) + `}}`),
		reply: make(chan []byte, 1),
	}
}

func (w *floorWorker) callOnce(ctx context.Context) {
	w.seq++
	id := w.prefix + strconv.FormatInt(w.seq, 10)
	deadline := time.Now().Add(w.f.opts.CallTimeout)
	// paho keeps the slice until it is written: a new one per call (the raw
	// client could reuse it; both are measured alike).
	b := make([]byte, 0, len(w.head)+len(w.mid)+len(w.tail1)+len(w.tail2)+2*len(id)+16)
	b = append(b, w.head...)
	b = append(b, id...)
	b = append(b, w.mid...)
	b = strconv.AppendInt(b, deadline.UnixMilli(), 10)
	b = append(b, w.tail1...)
	b = append(b, id...)
	b = append(b, w.tail2...)
	select { // a late answer of an earlier call that timed out
	case <-w.reply:
	default:
	}
	w.f.mu.Lock()
	w.f.pending[id] = w.reply
	w.f.mu.Unlock()
	defer func() {
		w.f.mu.Lock()
		delete(w.f.pending, id)
		w.f.mu.Unlock()
	}()

	start := callStart(w.due)
	tok, err := w.f.publish(w.topic, b)
	if err != nil {
		w.errs.add(fmt.Errorf("publish: %w", err))
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case p := <-w.reply:
			lat := time.Since(start)
			if w.tmpl.matches(p, id) {
				w.hist.record(lat)
				return
			}
			w.fullChecks++
			final, err := checkFloorReply(p, id, w.expect)
			if !final {
				continue // a notification before the response
			}
			if err != nil {
				w.errs.add(err)
				return
			}
			w.tmpl.learn(p, id)
			w.hist.record(lat)
			return
		case <-tok.Done():
			if err := tok.Error(); err != nil {
				w.errs.add(fmt.Errorf("publish: %w", err))
				return
			}
			tok = doneToken{}
		case <-timer.C:
			w.errs.add(fmt.Errorf("no reply within %s: %w", w.f.opts.CallTimeout, context.DeadlineExceeded))
			return
		case <-ctx.Done():
			w.errs.add(ctx.Err())
			return
		}
	}
}

// doneToken stands in for a publish token already waited for: its Done
// channel never fires again.
type doneToken struct{ paho.Token }

func (doneToken) Done() <-chan struct{} { return nil }

// checkFloorReply decodes a reply envelope; final is false for a message
// that is not the response (a notification, a request to the client).
func checkFloorReply(p []byte, id, expect string) (final bool, err error) {
	env, err := contract.DecodeEnvelope(p)
	if err != nil {
		return true, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	var r rpcResponse
	if err := json.Unmarshal(env.Message, &r); err != nil {
		return true, fmt.Errorf("%w: message: %v", ErrBadResponse, err)
	}
	if r.Method != "" {
		return false, nil
	}
	if want := strconv.Quote(id); string(bytes.TrimSpace(r.ID)) != want {
		return true, fmt.Errorf("%w: id %s, want %s", ErrBadResponse, r.ID, want)
	}
	return true, checkCall(&r, &expect)
}

// idTemplate is a reply that passed the full check, split at every
// occurrence of its correlation ID: a later reply that is the same bytes
// with another ID in the same places passes without being decoded (the
// load generator's CPU is the machine's too).
type idTemplate struct {
	parts [][]byte
}

func (t *idTemplate) matches(p []byte, id string) bool {
	if len(t.parts) < 2 {
		return false
	}
	for i, part := range t.parts {
		if !bytes.HasPrefix(p, part) {
			return false
		}
		p = p[len(part):]
		if i == len(t.parts)-1 {
			return len(p) == 0
		}
		if len(p) < len(id) || string(p[:len(id)]) != id {
			return false
		}
		p = p[len(id):]
	}
	return false
}

func (t *idTemplate) learn(p []byte, id string) {
	parts := bytes.Split(p, []byte(id))
	t.parts = t.parts[:0]
	for _, part := range parts {
		t.parts = append(t.parts, bytes.Clone(part))
	}
}
