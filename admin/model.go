package admin

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// The JSON shapes of the admin API. Times are RFC 3339 in UTC; an unset
// time is left out (pointer fields). Lists are never null.

// Token is a personal access token, without its secret.
type Token struct {
	ID       string         `json:"id"`
	User     string         `json:"user"`
	Scopes   []string       `json:"scopes"`
	ReadOnly bool           `json:"readOnly"`
	Entities []store.Entity `json:"entities"` // [] = any entity
	Agents   []string       `json:"agents"`   // [] = every expert agent
	Name     string         `json:"name,omitempty"`
	// Audience and Client are set on tokens issued to an OAuth client:
	// the MCP endpoint it may use and the client's ID.
	Audience  string     `json:"audience,omitempty"`
	Client    string     `json:"client,omitempty"`
	Created   time.Time  `json:"created"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	LastUsed  *time.Time `json:"lastUsed,omitempty"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// NewToken converts a stored token.
func NewToken(t store.Token) Token {
	j := Token{
		ID: t.ID, User: t.UserID, Scopes: t.Scopes, ReadOnly: t.ReadOnly, Entities: t.Entities, Agents: t.Agents, Name: t.Name,
		Audience: t.Audience, Client: t.ClientID, Created: t.Created.UTC(), ExpiresAt: optTime(t.ExpiresAt), LastUsed: optTime(t.LastUsed), RevokedAt: optTime(t.RevokedAt),
	}
	if j.Entities == nil {
		j.Entities = []store.Entity{}
	}
	if j.Scopes == nil {
		j.Scopes = []string{}
	}
	if j.Agents == nil {
		j.Agents = []string{}
	}
	return j
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// TokenRequest asks for a new token (POST /tokens).
type TokenRequest struct {
	User string `json:"user"`
	// Scopes: null or absent means the default scopes (tools:list,
	// tools:call); [] is refused.
	Scopes   []string       `json:"scopes"`
	ReadOnly bool           `json:"readOnly,omitempty"`
	Entities []store.Entity `json:"entities,omitempty"`
	// Agents limits the token to these expert agents' tools (their names
	// on the bus); absent or [] means every agent.
	Agents []string `json:"agents,omitempty"`
	// TTL is a Go duration ("720h"); "" means the token never expires.
	TTL  string `json:"ttl,omitempty"`
	Name string `json:"name,omitempty"`
}

// UserAgents are the expert agents a user's tokens may use ([] = every
// agent).
type UserAgents struct {
	User   string   `json:"user"`
	Agents []string `json:"agents"`
}

// UserAgentsRequest sets a user's agents (PUT /users/{user}/agents); []
// or absent lifts the limit.
type UserAgentsRequest struct {
	Agents []string `json:"agents"`
}

// User is a person who signs in on the OAuth authorization page (never
// their password hash). Their ID is the user of the tokens they consent to.
type User struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created,omitzero"`
	// Admin: the user may sign in to the operator console (docs/console.md).
	Admin bool `json:"admin"`
}

// UserAdminRequest grants or takes back a user's admin role (PUT
// /users/{user}/admin).
type UserAdminRequest struct {
	Admin bool `json:"admin"`
}

// UserRequest adds a sign-in user (POST /users).
type UserRequest struct {
	User string `json:"user"`
	// Password: "" means generate one (returned once in the answer).
	Password string `json:"password,omitempty"`
	// Admin gives the new user the admin role (the console).
	Admin bool `json:"admin,omitempty"`
}

// UserChange is the answer to a change of a user.
type UserChange struct {
	User User `json:"user"`
	// Password is set when the change generated one; it is shown once.
	Password string `json:"password,omitempty"`
	// TokensRevoked counts the tokens a removal revoked.
	TokensRevoked int `json:"tokensRevoked,omitempty"`
}

type userList struct {
	Users []User `json:"users"`
}

// CreatedToken is a new token with its secret, which is shown this once.
type CreatedToken struct {
	Token  Token  `json:"token"`
	Secret string `json:"secret"`
}

// Identity is an MQTT identity (never its password hash).
type Identity struct {
	Username string    `json:"username"`
	Role     acl.Role  `json:"role"`
	Disabled bool      `json:"disabled"`
	Created  time.Time `json:"created"`
}

// NewIdentity converts a stored identity.
func NewIdentity(id acl.Identity) Identity {
	return Identity{Username: id.Username, Role: id.Role, Disabled: id.Disabled, Created: id.Created.UTC()}
}

// IdentityRequest asks for a new MQTT identity (POST /identities).
type IdentityRequest struct {
	Username string   `json:"username"`
	Role     acl.Role `json:"role"`
	// Password: "" means generate one (returned once in the answer).
	Password string `json:"password,omitempty"`
}

// PasswordRequest rotates a password (POST /identities/{u}/password).
type PasswordRequest struct {
	// Password: "" means generate one (returned once in the answer).
	Password string `json:"password,omitempty"`
	// Disconnect the identity's connected clients, which otherwise stay
	// connected with the old password until they reconnect.
	Disconnect bool `json:"disconnect,omitempty"`
}

// IdentityChange is the answer to a change of an identity.
type IdentityChange struct {
	Identity Identity `json:"identity"`
	// Password is set when the change generated one; it is shown once.
	Password string `json:"password,omitempty"`
	// Live reports whether a running embedded broker applied the change
	// (disconnected the identity's clients where the change calls for it).
	// False on a data directory and with an external broker: new logins
	// follow the store, connected clients stay.
	Live bool `json:"live"`
	// Disconnected counts the connected clients that were disconnected.
	Disconnected int `json:"disconnected"`
}

// Rule is a topic ACL rule: an operator rule (Builtin false, removable), or
// one of the built-in rules of the ff/v2/ tree (read-only, granted by
// role).
type Rule struct {
	// ID is the operator rule's number as a string, or "builtin-..." for a
	// built-in rule.
	ID      string `json:"id"`
	Builtin bool   `json:"builtin"`
	// Username the rule applies to; "" is every identity. Built-in rules
	// apply by Role instead.
	Username string `json:"username,omitempty"`
	Role     string `json:"role,omitempty"`
	// Access is read (subscribe), write (publish) or readwrite.
	Access      string     `json:"access"`
	Filter      string     `json:"filter"`
	Description string     `json:"description,omitempty"`
	Created     *time.Time `json:"created,omitempty"`
}

// NewRule converts a stored operator rule.
func NewRule(r acl.Rule) Rule {
	return Rule{ID: strconv.FormatInt(r.ID, 10), Username: r.Username, Access: r.Access.String(),
		Filter: r.Filter, Created: optTime(r.Created)}
}

// RuleRequest asks for a new operator rule (POST /rules).
type RuleRequest struct {
	// Username the rule applies to; "" means every identity.
	Username string `json:"username"`
	// Access: "read", "write" or "readwrite".
	Access string `json:"access"`
	Filter string `json:"filter"`
}

// MQTTClient is a connected MQTT client.
type MQTTClient struct {
	ClientID        string     `json:"clientId"`
	Username        string     `json:"username"`
	Remote          string     `json:"remote"`
	Listener        string     `json:"listener"`
	ProtocolVersion int        `json:"protocolVersion"`
	CleanSession    bool       `json:"cleanSession"`
	ConnectedSince  *time.Time `json:"connectedSince,omitempty"`
}

// NewMQTTClient converts the broker's view of a client.
func NewMQTTClient(c broker.ClientInfo) MQTTClient {
	return MQTTClient{ClientID: c.ClientID, Username: c.Username, Remote: c.Remote, Listener: c.Listener,
		ProtocolVersion: int(c.ProtocolVersion), CleanSession: c.CleanSession, ConnectedSince: optTime(c.ConnectedSince)}
}

// Agent is one expert agent instance known from its presence.
type Agent struct {
	Agent    string    `json:"agent"` // the agent's name on the bus (its MQTT username)
	ClientID string    `json:"clientId"`
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Online   bool      `json:"online"`
	Since    time.Time `json:"since"`
	// Unresponsive: the gateway sends it no new calls for now
	// (requester.AgentStatus.Unresponsive).
	Unresponsive bool `json:"unresponsive,omitempty"`
	// LastSeen is when the gateway last heard the instance's status;
	// IntervalSeconds how often it said it repeats it (0: never);
	// Connection the connection it named. Left out when unknown.
	LastSeen        time.Time `json:"lastSeen,omitzero"`
	IntervalSeconds float64   `json:"intervalSeconds,omitempty"`
	Connection      string    `json:"connection,omitempty"`
}

// AgentTool is one tool the expert agents serve.
type AgentTool struct {
	Name        string `json:"name"`
	Agent       string `json:"agent"` // the agent that serves it
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// Served is the name the agent gives the tool, when Name is not it.
	Served string `json:"served,omitempty"`
	// Qualified says why Name is <agent>.<tool> (gateway.Qualified…).
	Qualified string `json:"qualified,omitempty"`
	// InputSchema is the tool's input schema as listed: what the agent
	// sent, untrusted.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// ReadOnly: the tool is annotated readOnlyHint (a read-only token may
	// call it).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// Agents is the answer of GET /agents. v1 serves one logical agent per bus
// (any number of instances), so the tools are those of every online
// instance.
type Agents struct {
	Agents []Agent     `json:"agents"`
	Tools  []AgentTool `json:"tools"`
	// ToolsError says why Tools is empty when listing them failed (no
	// agent online, or it did not answer in time).
	ToolsError string `json:"toolsError,omitempty"`
}

// Context is a context the gateway holds a response subscription for.
type Context struct {
	PlatformID string    `json:"platformId"`
	UserID     string    `json:"userId"`
	SessionID  string    `json:"sessionId"`
	EntityType string    `json:"entityType"`
	EntityID   string    `json:"entityId"`
	Subscribed time.Time `json:"subscribed"`
	LastUsed   time.Time `json:"lastUsed"`
	// AgeSeconds and IdleSeconds are measured by the server (since
	// Subscribed and LastUsed), so that clocks need not agree.
	AgeSeconds  float64 `json:"ageSeconds"`
	IdleSeconds float64 `json:"idleSeconds"`
	InFlight    int     `json:"inFlight"`
}

// Key is the context's "platform/user/session/entityType/entityId", the
// form ParseContextKey reads and the evict endpoint's path takes.
func (c Context) Key() string {
	return c.PlatformID + "/" + c.UserID + "/" + c.SessionID + "/" + c.EntityType + "/" + c.EntityID
}

func newContext(e requester.ContextEntry, now time.Time) Context {
	return Context{
		PlatformID: e.PlatformID, UserID: e.UserID, SessionID: e.SessionID, EntityType: e.EntityType, EntityID: e.EntityID,
		Subscribed: e.Subscribed.UTC(), LastUsed: e.LastUsed.UTC(),
		AgeSeconds: seconds(now.Sub(e.Subscribed)), IdleSeconds: seconds(now.Sub(e.LastUsed)), InFlight: e.InFlight,
	}
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// Done is the answer of a removal or revocation.
type Done struct {
	// What was removed, e.g. "token tb_xxxxxxxx".
	Done string `json:"done"`
}
