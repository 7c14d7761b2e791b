package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/internal/netsrc"
	"github.com/toolbus/toolbus/store"
)

// aclHook is the mochi hook that decides who may log in and what each client
// may do. It denies whatever the Authorizer does not allow, and any client
// it has no identity for.
//
// How mochi v2.7.9 consults it (read from its source, the tests pin it):
//   - SUBSCRIBE: OnACLCheck(client, filter, false) once per filter, with the
//     filter as sent, "$share/<group>/" prefix included (mochi recognises
//     the prefix case-insensitively). A refused filter gets SUBACK 0x80
//     (v3) / 0x87 (v5).
//   - Every delivery, to every receiving client, including retained
//     messages sent after a SUBSCRIBE and messages picked for one member of
//     a share group: OnACLCheck(receiver, topic name, false). So "may
//     subscribe" is also asked with plain topic names.
//   - PUBLISH: OnACLCheck(client, topic, true) before OnPublish; a refusal
//     drops QoS 0 silently, answers PUBACK/PUBREC 0x87 to v5 QoS 1/2 and
//     disconnects a v3 client that published at QoS 1/2.
//   - Last Will: never checked. mochi publishes (and retains) it from
//     sendLWT without OnACLCheck or OnPublish, so the Will is checked here
//     at login, and a client whose Will it may not publish is refused.
//   - Retained messages: stored after the publish check and OnPublish;
//     OnPublish is where retained request/response messages are refused.
//   - The inline client is never checked.
type aclHook struct {
	mqtt.HookBase

	srv            *mqtt.Server
	authn          Authenticator
	authz          Authorizer
	ctx            context.Context // cancelled by Broker.Close: aborts logins in progress
	connectTimeout time.Duration
	maxKeepAlive   uint16        // seconds
	logins         chan struct{} // bounds concurrent Authenticator calls (each may run a KDF)
	ids            identities
	log            *logrus.Entry
	v1Warned       sync.Map    // *mqtt.Client -> struct{}: told once that it speaks contract v1
	events         func(Event) // Options.Events: refused logins are audited
	throttle       *loginThrottle
	approved       sync.Map         // *mqtt.Client -> struct{}: logged in by OnConnect, until OnConnectAuthenticate
	lines          *logutil.Repeats // lines a client can make at will: refusals of every kind
	maxPresence    int              // Options.MaxPresenceBytes
}

func newACLHook(ctx context.Context, srv *mqtt.Server, o Options, maxLogins int) *aclHook {
	return &aclHook{
		srv:            srv,
		authn:          o.Authenticator,
		authz:          o.Authorizer,
		ctx:            ctx,
		connectTimeout: o.ConnectTimeout,
		maxKeepAlive:   uint16(seconds(o.MaxKeepAlive, math.MaxUint16)),
		logins:         make(chan struct{}, maxLogins),
		log:            o.Logger,
		events:         o.Events,
		throttle:       newLoginThrottle(o),
		lines:          logutil.NewRepeats(o.Logger, 0, 0),
		maxPresence:    o.MaxPresenceBytes,
	}
}

// clientLine writes a line about what a logged-in client did, counted by
// its client ID (logutil.Repeats): a client that repeats it gets one line and
// then one summary a window.
func (h *aclHook) clientLine(level logrus.Level, msg string, cl *mqtt.Client, fields logrus.Fields) {
	id, user := cut(cl.ID), cut(string(cl.Properties.Username))
	all := logrus.Fields{"client": id, "username": user}
	for k, v := range fields {
		all[k] = v
	}
	h.lines.Line(level, msg, id, logrus.Fields{"client": id, "username": user}, all)
}

// cachedAuthenticator is an Authenticator that can check a login against
// the recent successful ones without the KDF (*store.Store).
type cachedAuthenticator interface {
	AuthenticateCached(ctx context.Context, username string, password []byte) (acl.Identity, bool, error)
}

func (h *aclHook) ID() string { return "toolbus-acl" }

func (h *aclHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnect, mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnSessionEstablish,
		mqtt.OnDisconnect, mqtt.OnClientExpired, mqtt.OnPublish, mqtt.OnSubscribed:
		return true
	}
	return false
}

// OnConnect bounds the keepalive of MQTT 5 clients: one that asks for none,
// or for more than MaxKeepAlive, is told to use MaxKeepAlive, so that a dead
// connection is noticed. (mochi sets the read deadline from it right after
// this hook.) Then it logs the client in (login), and answers a refusal
// itself: mochi's OnConnectAuthenticate can only say "bad username or
// password", and a client refused for its Will, its client ID or a
// disabled identity, whose password was right, is better told "not
// authorized" so that its log says which.
func (h *aclHook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	if cl.Properties.ProtocolVersion >= 5 && (pk.Connect.Keepalive == 0 || pk.Connect.Keepalive > h.maxKeepAlive) {
		cl.State.ServerKeepalive = true
		cl.State.Keepalive = h.maxKeepAlive
	}
	code, ok := h.login(cl, pk)
	if ok {
		h.approved.Store(cl, struct{}{})
		return nil
	}
	if err := h.srv.SendConnack(cl, code, false, nil); err != nil {
		return fmt.Errorf("refuse login: send CONNACK: %w", err)
	}
	return code
}

// OnConnectAuthenticate lets in the clients OnConnect logged in.
func (h *aclHook) OnConnectAuthenticate(cl *mqtt.Client, _ packets.Packet) bool {
	_, ok := h.approved.LoadAndDelete(cl)
	return ok
}

// Why a login was refused, as far as its CONNACK code tells.
type refusal int

const (
	// refusedCredentials: a fault of the credentials, an unknown user and
	// a wrong password alike.
	refusedCredentials refusal = iota
	// refusedDenied: a refusal that does not depend on the credentials (a
	// reserved client ID) or that comes after they were found right.
	refusedDenied
	// refusedThrottled: too many failed logins from the client's address
	// (for this username, or in all); the password was not checked.
	refusedThrottled
	// refusedBusy: no KDF slot came free within ConnectTimeout; the
	// password was not checked.
	refusedBusy
)

// Codes with the reason string an MQTT 5 client is told.
var (
	errThrottledCode = packets.Code{Code: packets.ErrConnectionRateExceeded.Code, Reason: "too many failed logins from this address; try again later"}
	errBusyCode      = packets.Code{Code: packets.ErrServerBusy.Code, Reason: "too many logins at once; try again later"}
)

// refusalCode is the CONNACK code of a refused login. "Bad username or
// password" for any fault of the credentials (unknown user and wrong
// password alike, so that a client cannot probe which identities exist);
// "not authorized" for a refusal that does not depend on them or that comes
// after they were checked (MQTT 3.1.1: 0x04 and 0x05).
//
// A login refused before its password was checked says so, rather than
// "bad username or password": an agent with the right password that is
// told its password is wrong stops, or pages its operator, for nothing.
// MQTT 5 has the exact codes, 0x9F "connection rate exceeded" for the
// throttle and 0x89 "server busy" for a full login queue; MQTT 3.1.1 has
// only 0x03 "server unavailable" for both, which its clients take as
// "retry later". Neither tells anything about the username: the throttle
// counts the failures of unknown usernames as of known ones, and the queue
// is the same for all.
func refusalCode(cl *mqtt.Client, why refusal) packets.Code {
	v5 := cl.Properties.ProtocolVersion >= 5
	switch {
	case why == refusedThrottled && v5:
		return errThrottledCode
	case why == refusedBusy && v5:
		return errBusyCode
	case why == refusedThrottled, why == refusedBusy:
		return packets.Err3ServerUnavailable
	case why == refusedDenied && v5:
		return packets.ErrNotAuthorized
	case why == refusedDenied:
		return packets.Err3NotAuthorized
	case v5:
		return packets.ErrBadUsernameOrPassword
	default:
		return packets.ErrMalformedUsernameOrPassword // 0x04, "bad user name or password"
	}
}

// login checks a client's login: username and password through the
// Authenticator (anonymous logins are refused), then the client ID and the
// Will. A refusal says why in the log and the audit, and its CONNACK code
// only whether the credentials were at fault or were not checked
// (refusalCode).
//
// Anyone who reaches the listener can make refusals, as many as they
// like, with a username and a client ID of up to 64 KiB each: both are cut
// (maxField) before they reach a log line or an Event, and the lines are
// counted by source address (logutil.Repeats): the first is written, the rest
// summed up once a window.
func (h *aclHook) login(cl *mqtt.Client, pk packets.Packet) (packets.Code, bool) {
	username := string(pk.Connect.Username)
	src := netsrc.Key(cl.Net.Remote)
	fields := logrus.Fields{
		"client": cut(cl.ID), "username": cut(username), "remote": cut(cl.Net.Remote), "listener": cl.Net.Listener,
	}
	log := h.log.WithFields(fields)
	why := refusedCredentials
	refuse := func(reason string, err error) (packets.Code, bool) {
		line := logrus.Fields{"reason": reason}
		for k, v := range fields {
			line[k] = v
		}
		if err != nil {
			line[logrus.ErrorKey] = cutErr(err)
		}
		h.lines.Line(logrus.InfoLevel, "login refused", src, logrus.Fields{"source": src}, line)
		if h.events != nil {
			h.events(Event{Time: time.Now(), Kind: EventLoginRefused, ClientID: cut(cl.ID), Username: cut(username),
				Remote: cut(cl.Net.Remote), Action: "connect", Err: errors.New(reason)})
		}
		return refusalCode(cl, why), false
	}

	if !pk.Connect.UsernameFlag || username == "" {
		return refuse("anonymous", nil)
	}
	if cl.ID == mqtt.InlineClientId {
		// Taking over this ID would disconnect the gateway's own client.
		why = refusedDenied
		return refuse("reserved client ID", nil)
	}
	if !contract.ValidLevel(username) {
		// No stored identity can have this name; spare the KDF.
		return refuse("bad credentials", contract.ErrInvalidLevel)
	}

	ctx, cancel := context.WithTimeout(h.ctx, h.connectTimeout)
	defer cancel()
	id, err := h.authenticate(ctx, username, pk.Connect.Password, cl.Net.Remote)
	switch {
	case errors.Is(err, errThrottled):
		why = refusedThrottled
		return refuse("too many failed logins", nil)
	case errors.Is(err, errLoginQueue):
		why = refusedBusy
		return refuse("login queue timeout", ctx.Err())
	case errors.Is(err, store.ErrBadCredentials):
		return refuse("bad credentials", nil)
	case errors.Is(err, store.ErrDisabled), err == nil && id.Disabled:
		why = refusedDenied // the store says so only to whoever knows the password
		return refuse("identity disabled", nil)
	case err != nil:
		return refuse("authentication failed", err)
	}

	// The password was right: what follows is refused as not authorized.
	why = refusedDenied
	// A client ID names a session. Another identity taking it over would
	// cut the owner off (and, with clean session off, inherit its
	// subscriptions), so only the same username may.
	if old, ok := h.srv.Clients.Get(cl.ID); ok && old != cl && string(old.Properties.Username) != username {
		h.lines.Line(logrus.WarnLevel, "client ID held by another identity", cut(cl.ID), logrus.Fields{"client": cut(cl.ID)},
			logrus.Fields{"client": cut(cl.ID), "username": username, "owner": string(old.Properties.Username)})
		return refuse("client ID in use", nil)
	}
	if pk.Connect.WillFlag {
		if reason := h.willRefused(cl, id, pk); reason != "" {
			h.lines.Line(logrus.WarnLevel, reason, cut(cl.ID), logrus.Fields{"client": cut(cl.ID), "username": username},
				logrus.Fields{"client": cut(cl.ID), "username": username, "will": cut(pk.Connect.WillTopic), "retain": pk.Connect.WillRetain})
			return refuse("will not allowed", nil)
		}
	}

	h.ids.put(cl, id)
	log.WithField("role", id.Role).Debug("login")
	return packets.CodeSuccess, true
}

// Why authenticate refused a login before the Authenticator could.
var (
	errThrottled  = errors.New("too many failed logins")
	errLoginQueue = errors.New("login queue timeout")
)

// authenticate checks a login: against the cache of recent ones first
// (clients reconnecting never queue behind password guesses), then, unless
// the throttle says the username or the source failed too often, with the
// KDF, a bounded number at once.
func (h *aclHook) authenticate(ctx context.Context, username string, password []byte, remote string) (acl.Identity, error) {
	if c, ok := h.authn.(cachedAuthenticator); ok {
		if id, ok, err := c.AuthenticateCached(ctx, username, password); ok || err != nil {
			return id, err
		}
	}
	if !h.throttle.allow(username, remote) {
		return acl.Identity{}, errThrottled
	}
	select {
	case h.logins <- struct{}{}:
	case <-ctx.Done():
		return acl.Identity{}, errLoginQueue
	}
	id, err := h.authn.Authenticate(ctx, username, password)
	<-h.logins
	if errors.Is(err, store.ErrBadCredentials) {
		h.throttle.failed(username, remote)
	}
	return id, err
}

// willRefused checks the Will at login, since mochi publishes it unchecked.
// Under the reserved trees the only Will there is, is an agent's own
// presence; other Wills need the publish right on their topic. It returns the reason for a
// refusal, or "".
func (h *aclHook) willRefused(cl *mqtt.Client, id acl.Identity, pk packets.Packet) string {
	topic := pk.Connect.WillTopic
	switch {
	case topic == "" || !mqtt.IsValidFilter(topic, true):
		return "invalid will topic"
	case strings.HasPrefix(topic, mcpPrefix) && topic != presenceTopic(string(cl.Properties.Username), cl.ID):
		return "a will under " + mcpPrefix + " must be the client's own presence topic"
	case pk.Connect.WillRetain && isContextTopic(topic):
		return "retained will on a request/response topic"
	case isPresenceTopic(topic) && len(pk.Connect.WillPayload) > h.maxPresence:
		return "presence will payload over " + strconv.Itoa(h.maxPresence) + " bytes"
	case !h.authz.Allow(id, cl.ID, acl.Publish, topic):
		return "will topic not allowed"
	}
	return ""
}

// OnSessionEstablish runs after a successful login, before the session is
// set up. If the client ID is taken over, the old client is about to be
// disconnected and its session handed over: forget its identity now.
func (h *aclHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if old, ok := h.srv.Clients.Get(cl.ID); ok && old != cl {
		h.ids.forget(old)
	}
	h.ids.maybePrune(h.staleClient)
}

// staleClient reports whether cl's connection is gone and mochi no longer
// holds it as the session of its client ID.
func (h *aclHook) staleClient(cl *mqtt.Client) bool {
	if !cl.Closed() {
		return false
	}
	cur, ok := h.srv.Clients.Get(cl.ID)
	return !ok || cur != cl
}

// OnDisconnect forgets the identity when the session ends with the
// connection. A session that outlives it keeps the identity until
// OnClientExpired or a takeover, so that messages queued for it are
// still checked against, and allowed for, the identity that subscribed.
func (h *aclHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if expire || cl.IsTakenOver() {
		h.ids.forget(cl)
	}
}

// OnClientExpired forgets the identity of an expired session.
func (h *aclHook) OnClientExpired(cl *mqtt.Client) { h.ids.forget(cl) }

// OnACLCheck asks the Authorizer with the identity cl logged in as; an
// unknown client is denied. write is a publish; otherwise topic is a
// subscription filter or, on delivery, the topic name of the message.
func (h *aclHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	id, ok := h.ids.get(cl)
	if !ok {
		if h.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			h.clientLine(logrus.DebugLevel, "acl: no identity for client", cl, logrus.Fields{"topic": cut(topic)})
		}
		return false
	}
	action := acl.Subscribe
	if write {
		action = acl.Publish
	}
	if h.authz.Allow(*id, cl.ID, action, topic) {
		return true
	}
	if isV1(topic) {
		h.warnV1(cl, id.Username, topic)
		return false
	}
	// Refused subscriptions are logged by OnSubscribed; a refused delivery
	// is routine (a filter that also matches topics the client may not
	// read), so only refused publishes are worth Info. A client may repeat
	// a refused QoS 0 publish as fast as it can send it: one line, then a
	// count a window (clientLine).
	level := logrus.DebugLevel
	msg := "acl: denied delivery"
	if write {
		level, msg = logrus.InfoLevel, "acl: denied"
	}
	if h.log.Logger.IsLevelEnabled(level) {
		h.clientLine(level, msg, cl, logrus.Fields{"action": action.String(), "topic": cut(topic)})
	}
	return false
}

// maxV1Warned bounds the clients remembered as told about contract v1.
const maxV1Warned = 4096

// isV1 reports whether a topic or filter is in the retired contract v1
// tree (plain or through $share), which the ACL refuses to everyone.
func isV1(topic string) bool {
	if rest, ok := strings.CutPrefix(topic, "$share/"); ok {
		_, topic, _ = strings.Cut(rest, "/")
	}
	return strings.HasPrefix(topic, "ff/v1/mcp/")
}

// warnV1 says once per connection that a client speaks the retired
// contract v1, which the ACL refuses (mochi also ends the connection of a
// client whose QoS 1 publish it refuses): an old agent or gateway would
// otherwise fail with no word of why.
func (h *aclHook) warnV1(cl *mqtt.Client, username, topic string) {
	if _, told := h.v1Warned.LoadOrStore(cl, struct{}{}); told {
		return
	}
	n := 0
	h.v1Warned.Range(func(any, any) bool { n++; return n <= maxV1Warned })
	if n > maxV1Warned {
		h.v1Warned.Clear()
	}
	h.log.WithFields(logrus.Fields{"client": cut(cl.ID), "username": cut(username), "topic": cut(topic)}).
		Warn("a client speaks MQTT contract v1 (ff/v1/mcp/): its subscriptions and publishes are refused; upgrade it to contract v2 (docs/protocol.md)")
}

// OnSubscribed logs the filters mochi refused.
func (h *aclHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if cl.Net.Inline {
		return
	}
	for i, f := range pk.Filters {
		if i < len(reasonCodes) && reasonCodes[i] >= packets.ErrUnspecifiedError.Code && isV1(f.Filter) {
			h.warnV1(cl, string(cl.Properties.Username), f.Filter)
			continue
		}
		if i < len(reasonCodes) && reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
			h.clientLine(logrus.InfoLevel, "subscription refused", cl, logrus.Fields{"filter": cut(f.Filter), "code": reasonCodes[i]})
		}
	}
}

// errRetainedContext is the reason given to MQTT 5 clients.
var errRetainedContext = packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "retained messages are not allowed on request/response topics"}

// OnPublish refuses retained messages on request/response topics: the broker
// would replay them to every later subscriber (an agent would run the
// request again, a gateway would see a stale reply). It also refuses a
// presence status over MaxPresenceBytes: the broker keeps it retained for
// good and every gateway holds and lists it, so an agent could make the
// gateways hold and answer megabytes for each of its client IDs. The
// message is dropped, not delivered unretained. A v5 client publishing at
// QoS 1/2 gets the refusal in its PUBACK/PUBREC; a v3 client has no way
// to hear it, so it gets a normal acknowledgement (rather than a hanging
// QoS flow).
func (h *aclHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	switch {
	case pk.FixedHeader.Retain && isContextTopic(pk.TopicName):
		h.clientLine(logrus.InfoLevel, "retained publish refused", cl, logrus.Fields{"topic": cut(pk.TopicName)})
		return h.refusePublish(cl, pk, errRetainedContext)
	case !cl.Net.Inline && len(pk.Payload) > h.maxPresence && isPresenceTopic(pk.TopicName):
		h.clientLine(logrus.InfoLevel, "presence status refused: too large", cl,
			logrus.Fields{"topic": cut(pk.TopicName), "bytes": len(pk.Payload), "max": h.maxPresence})
		return h.refusePublish(cl, pk, packets.Code{Code: packets.ErrPayloadFormatInvalid.Code,
			Reason: "presence status over " + strconv.Itoa(h.maxPresence) + " bytes"})
	}
	return pk, nil
}

// refusePublish drops pk, telling the client code where it can (MQTT 5,
// QoS 1 or 2).
func (h *aclHook) refusePublish(cl *mqtt.Client, pk packets.Packet, code packets.Code) (packets.Packet, error) {
	if cl.Net.Inline || cl.Properties.ProtocolVersion < 5 || pk.FixedHeader.Qos == 0 {
		return pk, packets.CodeSuccessIgnore // acknowledged as usual, neither retained nor delivered
	}
	ack := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Puback},
		PacketID:    pk.PacketID,
		ReasonCode:  code.Code,
		Properties:  packets.Properties{ReasonString: code.Reason},
	}
	if pk.FixedHeader.Qos == 2 {
		ack.FixedHeader.Type = packets.Pubrec // a failing PUBREC ends the QoS 2 flow
	}
	if err := cl.WritePacket(ack); err != nil {
		h.log.WithError(err).WithField("client", cut(cl.ID)).Debug("write refusal ack")
	}
	return pk, packets.ErrRejectPacket
}
