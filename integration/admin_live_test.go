package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// adminClient returns an admin API client of srv, with a fresh admin token.
func adminClient(t *testing.T, srv *server.Server) *admin.Client {
	t.Helper()
	secret, _, err := srv.Store().CreateToken(testCtx(t, 10*time.Second), store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := admin.NewClient("http://"+srv.HTTPAddr().String(), secret, admin.ClientOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// liveClient is a paho client (MQTT 3.1.1, no auto-reconnect) whose
// messages and connection loss the test reads.
type liveClient struct {
	c    paho.Client
	msgs chan string // "topic payload"
	lost chan error
}

func dialLive(t *testing.T, srv *server.Server, username, password, clientID string) (*liveClient, error) {
	t.Helper()
	l := &liveClient{msgs: make(chan string, 64), lost: make(chan error, 1)}
	o := paho.NewClientOptions().AddBroker("tcp://" + srv.MQTTAddr().String()).
		SetClientID(clientID).SetUsername(username).SetPassword(password).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			l.msgs <- m.Topic() + " " + string(m.Payload())
		}).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case l.lost <- err:
			default:
			}
		})
	l.c = paho.NewClient(o)
	tok := l.c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, errors.New("connect: no CONNACK in 10s")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { l.c.Disconnect(0) })
	return l, nil
}

// subscribe returns the SUBACK code of filter (0x80: refused).
func (l *liveClient) subscribe(t *testing.T, filter string) byte {
	t.Helper()
	tok := l.c.Subscribe(filter, 0, nil)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	return tok.(*paho.SubscribeToken).Result()[filter]
}

func (l *liveClient) publish(t *testing.T, topic, payload string) {
	t.Helper()
	tok := l.c.Publish(topic, 0, false, payload)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// next returns the next message, failing the test after 10s.
func (l *liveClient) next(t *testing.T) string {
	t.Helper()
	select {
	case m := <-l.msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message in 10s")
		return ""
	}
}

// TestAdminLiveACL: rules added and removed through the admin API are in
// force on the running broker for clients already connected. Absence is
// shown without waiting on a clock: the publisher sends a marker on a topic
// that stays allowed right after the refused message, and messages of one
// publisher arrive in order, so the marker arriving first proves the
// refused one is not coming.
func TestAdminLiveACL(t *testing.T) {
	srv := startServer(t, server.Config{})
	adm := adminClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	pw := map[string]string{}
	for _, u := range []string{"reader", "writer"} {
		ch, err := adm.AddIdentity(ctx, admin.IdentityRequest{Username: u, Role: acl.RoleClient})
		if err != nil {
			t.Fatal(err)
		}
		pw[u] = ch.Password
	}
	if _, err := adm.AddRule(ctx, admin.RuleRequest{Access: "readwrite", Filter: "marker/#"}); err != nil {
		t.Fatal(err)
	}
	reader, err := dialLive(t, srv, "reader", pw["reader"], "reader-1")
	if err != nil {
		t.Fatal(err)
	}
	writer, err := dialLive(t, srv, "writer", pw["writer"], "writer-1")
	if err != nil {
		t.Fatal(err)
	}
	if code := reader.subscribe(t, "marker/#"); code != 0 {
		t.Fatalf("marker subscription refused: %#x", code)
	}
	marker := func(n string) {
		t.Helper()
		writer.publish(t, "marker/m", n)
		if got := reader.next(t); got != "marker/m "+n {
			t.Fatalf("got %q before marker %s", got, n)
		}
	}

	// No rule yet: the subscription is refused, the publish goes nowhere.
	if code := reader.subscribe(t, "sensors/#"); code != 0x80 {
		t.Fatalf("subscribe without a rule: SUBACK %#x, want 0x80", code)
	}
	writer.publish(t, "sensors/t", "m0")
	marker("k0")

	readRule, err := adm.AddRule(ctx, admin.RuleRequest{Username: "reader", Access: "read", Filter: "sensors/#"})
	if err != nil {
		t.Fatal(err)
	}
	writeRule, err := adm.AddRule(ctx, admin.RuleRequest{Username: "writer", Access: "write", Filter: "sensors/#"})
	if err != nil {
		t.Fatal(err)
	}
	if code := reader.subscribe(t, "sensors/#"); code != 0 {
		t.Fatalf("subscribe after the rule was added: SUBACK %#x", code)
	}
	writer.publish(t, "sensors/t", "m1")
	if got := reader.next(t); got != "sensors/t m1" {
		t.Fatalf("after the rules were added: got %q, want sensors/t m1", got)
	}

	// The read rule goes: the subscription mochi still holds delivers
	// nothing (every delivery is checked), and a new one is refused.
	if err := adm.RemoveRule(ctx, readRule.ID); err != nil {
		t.Fatal(err)
	}
	writer.publish(t, "sensors/t", "m2")
	marker("k1")
	if code := reader.subscribe(t, "sensors/x"); code != 0x80 {
		t.Fatalf("subscribe after the rule was removed: SUBACK %#x, want 0x80", code)
	}

	// The write rule goes: the publish is refused.
	if _, err := adm.AddRule(ctx, admin.RuleRequest{Username: "reader", Access: "read", Filter: "sensors/#"}); err != nil {
		t.Fatal(err)
	}
	writer.publish(t, "sensors/t", "m3")
	if got := reader.next(t); got != "sensors/t m3" {
		t.Fatalf("with both rules again: got %q, want sensors/t m3", got)
	}
	if err := adm.RemoveRule(ctx, writeRule.ID); err != nil {
		t.Fatal(err)
	}
	writer.publish(t, "sensors/t", "m4")
	marker("k2")
}

// TestAdminDisableDisconnects: disabling an identity through the admin API
// disconnects its connected clients at once and refuses their logins until
// it is enabled again; removing it does the same.
func TestAdminDisableDisconnects(t *testing.T) {
	srv := startServer(t, server.Config{})
	adm := adminClient(t, srv)
	ctx := testCtx(t, 60*time.Second)
	ch, err := adm.AddIdentity(ctx, admin.IdentityRequest{Username: "dev1", Role: acl.RoleClient})
	if err != nil {
		t.Fatal(err)
	}
	pw := ch.Password
	if _, err := adm.AddIdentity(ctx, admin.IdentityRequest{Username: "bystander", Role: acl.RoleClient, Password: "bystander-pass-1"}); err != nil {
		t.Fatal(err)
	}
	a, err := dialLive(t, srv, "dev1", pw, "dev1-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := dialLive(t, srv, "dev1", pw, "dev1-b")
	if err != nil {
		t.Fatal(err)
	}
	other, err := dialLive(t, srv, "bystander", "bystander-pass-1", "by-1")
	if err != nil {
		t.Fatal(err)
	}

	ch, err = adm.SetDisabled(ctx, "dev1", true)
	if err != nil || !ch.Live || ch.Disconnected != 2 {
		t.Fatalf("disable = %+v, %v; want 2 clients disconnected", ch, err)
	}
	for _, l := range []*liveClient{a, b} {
		select {
		case <-l.lost:
		case <-time.After(10 * time.Second):
			t.Fatal("a client of the disabled identity is still connected")
		}
	}
	if _, err := dialLive(t, srv, "dev1", pw, "dev1-c"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authorized") {
		t.Fatalf("login of the disabled identity: %v, want refused", err)
	}
	cls, err := adm.Clients(ctx)
	if err != nil || len(cls) != 1 || cls[0].Username != "bystander" {
		t.Fatalf("clients after disable = %+v, %v; want the bystander only", cls, err)
	}
	if !other.c.IsConnectionOpen() {
		t.Fatal("the bystander was disconnected")
	}

	if _, err := adm.SetDisabled(ctx, "dev1", false); err != nil {
		t.Fatal(err)
	}
	c, err := dialLive(t, srv, "dev1", pw, "dev1-d")
	if err != nil {
		t.Fatalf("login after enable: %v", err)
	}
	if ch, err = adm.RemoveIdentity(ctx, "dev1"); err != nil || ch.Disconnected != 1 {
		t.Fatalf("remove = %+v, %v; want 1 client disconnected", ch, err)
	}
	select {
	case <-c.lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the removed identity's client is still connected")
	}
	if _, err := dialLive(t, srv, "dev1", pw, "dev1-e"); err == nil {
		t.Fatal("the removed identity logged in")
	}
}
