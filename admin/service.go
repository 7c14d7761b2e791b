package admin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// Store is what the Service keeps its model in. *store.Store satisfies it.
type Store interface {
	CreateToken(ctx context.Context, spec store.TokenSpec) (string, store.Token, error)
	ListTokens(ctx context.Context, userID string) ([]store.Token, error)
	RevokeToken(ctx context.Context, id string) error

	AddIdentity(ctx context.Context, username string, role acl.Role, password []byte) (acl.Identity, error)
	Identity(ctx context.Context, username string) (acl.Identity, error)
	ListIdentities(ctx context.Context) ([]acl.Identity, error)
	RemoveIdentity(ctx context.Context, username string) error
	SetDisabled(ctx context.Context, username string, disabled bool) error
	SetPassword(ctx context.Context, username string, password []byte) error

	AddRule(ctx context.Context, r acl.Rule) (acl.Rule, error)
	ListRules(ctx context.Context) ([]acl.Rule, error)
	RemoveRule(ctx context.Context, id int64) error

	QueryAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditEvent, string, error)
	AuditAfter(ctx context.Context, q store.AuditQuery, mark int64, limit int) ([]store.AuditEvent, int64, bool, error)

	SetUserAgents(ctx context.Context, user string, agents []string) error
	ListUserAgents(ctx context.Context) (map[string][]string, error)

	SetAgentLimit(ctx context.Context, agent, limit string) error
	AgentLimits(ctx context.Context) (map[string]string, error)

	AddUser(ctx context.Context, id string, password []byte) (store.User, error)
	ListUsers(ctx context.Context) ([]store.User, error)
	SetUserPassword(ctx context.Context, id string, password []byte) error
	RemoveUser(ctx context.Context, id string) (int, error)
	SetUserAdmin(ctx context.Context, id string, on bool) error

	ListOAuthClients(ctx context.Context) ([]store.OAuthClientSummary, error)
	DeleteOAuthClient(ctx context.Context, id string) (store.DeletedOAuthClient, error)
}

// Policy is the running broker's authorizer. *acl.Policy satisfies it.
type Policy interface {
	SetRules(rules []acl.Rule)
}

// Broker is the running embedded broker. *broker.Broker satisfies it.
type Broker interface {
	Clients() []broker.ClientInfo
	Disconnect(username string) int
}

// Requester is the running gateway's side of the MQTT contract.
// *requester.Requester satisfies it.
type Requester interface {
	Agents() []requester.AgentStatus
	AllContexts() []requester.ContextEntry
	Evict(ctx context.Context, c contract.Context) error
}

// Options configures a Service. Only Store is required: a Service on a bare
// store is the data-directory door.
type Options struct {
	Store Store
	// Policy gets the operator rules again after every rule change (and
	// every identity removal, which removes the identity's rules); nil
	// means changes are stored only and apply at the next start.
	Policy Policy
	// Broker is the embedded broker: disabling or removing an identity
	// disconnects its clients there. nil: no embedded broker (Clients
	// answers ErrNoBroker, or ErrNoServer without a Requester either).
	Broker Broker
	// Requester lists agents and contexts; nil means no running server
	// (Agents and Contexts answer ErrNoServer).
	Requester Requester
	// AgentTools lists the expert agents' tools as the token sees them;
	// nil leaves Agents.Tools empty. It runs under ToolsTimeout.
	AgentTools func(ctx context.Context, tok store.Token) ([]AgentTool, error)
	// ToolsTimeout bounds AgentTools; 0 means 5s.
	ToolsTimeout time.Duration
	// ToolScopes are the scopes tools declare (platformtools.ToolScopes),
	// which a token may carry beside store.BuiltinScopes; any other scope
	// is refused, naming the valid ones.
	ToolScopes []string
	// Calls returns the last hour of tool calls by minute (GET /calls);
	// nil means none kept (a data directory, or the console off).
	Calls func() CallHistory
	// Settings returns the process's effective settings (GET /config);
	// nil means none to show (a data directory).
	Settings func() []Setting
	// ApplyAgentLimits, if set, gets every per-agent rate limit after each
	// change of one (SetAgentLimit), to put them in force in the running
	// gateway (gateway.Gateway.SetAgentLimits); nil means changes are
	// stored only and apply at the next start.
	ApplyAgentLimits func(map[string]gateway.Limit)
	// OnChange, if set, is called after every change the Service is asked
	// for, made or refused (the audit hook). It runs on the request's
	// goroutine: it must not block for long.
	OnChange func(Change)
	// Logger receives a line per change (component "admin"); nil discards.
	Logger *logrus.Entry
}

// Change is one change asked of the Service, for OnChange.
type Change struct {
	Time time.Time
	// Actor is who asked: the token (its ID and user) through the API,
	// the operator's name (User, Door DoorConsole) through the console,
	// nothing (Local) through the data directory.
	TokenID, User string
	Local         bool
	// Door is how the change came: DoorAPI, DoorConsole or DoorDataDir.
	Door string
	// Action names the change ("token.create", "identity.disable", ...);
	// Target what it applies to ("identity agent-7", "rule 12").
	Action, Target string
	// Err is why the change was refused or failed; nil if it was made.
	Err error
}

// Doors of a Change.
const (
	DoorAPI     = "api"      // the admin API, with an admin token
	DoorConsole = "console"  // the operator console, signed in
	DoorDataDir = "data-dir" // the CLI on a data directory or a store URL
)

type consoleKey struct{}

// ConsoleContext is the context a console page asks the Service in for
// operator, a signed-in admin: changes name the operator and DoorConsole,
// and Agents lists every agent's tools (no agent limit). The token it
// carries is never stored and has no secret.
func ConsoleContext(ctx context.Context, operator string) context.Context {
	ctx = context.WithValue(ctx, consoleKey{}, operator)
	return store.WithToken(ctx, store.Token{ID: "console", UserID: operator, Scopes: []string{store.ScopeAdmin}}, "")
}

// MinPasswordLen is the shortest MQTT password the Service accepts.
const MinPasswordLen = 12

// Service is the operators' model. It is safe for concurrent use.
type Service struct {
	opts Options
	log  *logrus.Entry

	// rulesMu orders rule changes with the reloads that follow them, so
	// that a slow reload cannot install an older rule list over a newer one.
	rulesMu sync.Mutex
	// agentLimitsMu does the same for the per-agent rate limits.
	agentLimitsMu sync.Mutex
}

// NewService returns a Service over opts.Store.
func NewService(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("admin: Options.Store is required")
	}
	if opts.ToolsTimeout <= 0 {
		opts.ToolsTimeout = 5 * time.Second
	}
	return &Service{opts: opts, log: logutil.Component(opts.Logger, "admin")}, nil
}

// change runs one change. Every change of the model goes through here, so
// this is where it is logged and where OnChange (audit) sees it.
func (s *Service) change(ctx context.Context, action, target string, f func() error) error {
	err := f()
	c := Change{Time: time.Now(), Action: action, Target: target, Err: err, Door: DoorAPI}
	if op, ok := ctx.Value(consoleKey{}).(string); ok {
		c.User, c.Door = op, DoorConsole
	} else if tok, _, ok := store.TokenFrom(ctx); ok {
		c.TokenID, c.User = tok.ID, tok.UserID
	} else {
		c.Local, c.Door = true, DoorDataDir
	}
	log := s.log.WithFields(logrus.Fields{"action": action, "target": target, "token": c.TokenID, "user": c.User})
	if err != nil {
		log.WithError(err).Info("admin change refused")
	} else {
		log.Info("admin change")
	}
	if s.opts.OnChange != nil {
		s.opts.OnChange(c)
	}
	return err
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}

// ListTokens lists the tokens of user ("" = every user), oldest first.
func (s *Service) ListTokens(ctx context.Context, user string) ([]Token, error) {
	toks, err := s.opts.Store.ListTokens(ctx, user)
	if err != nil {
		return nil, err
	}
	out := make([]Token, len(toks))
	for i, t := range toks {
		out[i] = NewToken(t)
	}
	return out, nil
}

// CreateToken creates a token; its secret is in the answer only.
func (s *Service) CreateToken(ctx context.Context, req TokenRequest) (CreatedToken, error) {
	var out CreatedToken
	err := s.change(ctx, "token.create", "user "+req.User, func() error {
		for _, sc := range req.Scopes {
			if !slices.Contains(store.BuiltinScopes, sc) && !slices.Contains(s.opts.ToolScopes, sc) {
				return invalid("unknown scope %q: the scopes are %s", sc, strings.Join(s.ValidScopes(), ", "))
			}
		}
		spec := store.TokenSpec{UserID: req.User, Scopes: req.Scopes, ReadOnly: req.ReadOnly, Entities: req.Entities, Agents: req.Agents, Name: req.Name}
		if req.TTL != "" {
			ttl, err := time.ParseDuration(req.TTL)
			if err != nil {
				return invalid("ttl %q: want a Go duration such as 720h", req.TTL)
			}
			spec.TTL = ttl // the store refuses a negative one
		}
		secret, tok, err := s.opts.Store.CreateToken(ctx, spec)
		if err != nil {
			return err
		}
		out = CreatedToken{Token: NewToken(tok), Secret: secret}
		return nil
	})
	return out, err
}

// ValidScopes are the scopes a token may carry here.
func (s *Service) ValidScopes() []string {
	return append(slices.Clone(store.BuiltinScopes), s.opts.ToolScopes...)
}

// RevokeToken revokes the token with this ID.
func (s *Service) RevokeToken(ctx context.Context, id string) error {
	return s.change(ctx, "token.revoke", "token "+id, func() error {
		return s.opts.Store.RevokeToken(ctx, id)
	})
}

// ListUserAgents lists the users whose tokens are limited to some expert
// agents, by user.
func (s *Service) ListUserAgents(ctx context.Context) ([]UserAgents, error) {
	all, err := s.opts.Store.ListUserAgents(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]UserAgents, 0, len(all))
	for u, agents := range all {
		out = append(out, UserAgents{User: u, Agents: agents})
	}
	slices.SortFunc(out, func(a, b UserAgents) int { return strings.Compare(a.User, b.User) })
	return out, nil
}

// SetUserAgents limits every token of user to these expert agents; an
// empty list lifts the limit.
func (s *Service) SetUserAgents(ctx context.Context, user string, req UserAgentsRequest) (UserAgents, error) {
	err := s.change(ctx, "user.agents", "user "+user, func() error {
		err := s.opts.Store.SetUserAgents(ctx, user, req.Agents)
		if errors.Is(err, store.ErrInvalidTokenSpec) {
			return invalid("%v", err)
		}
		return err
	})
	agents := req.Agents
	if agents == nil {
		agents = []string{}
	}
	return UserAgents{User: user, Agents: agents}, err
}

// ListIdentities lists the MQTT identities by username.
func (s *Service) ListIdentities(ctx context.Context) ([]Identity, error) {
	ids, err := s.opts.Store.ListIdentities(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Identity, len(ids))
	for i, id := range ids {
		out[i] = NewIdentity(id)
	}
	return out, nil
}

// AddIdentity adds an MQTT identity, with a generated password (returned
// once) if the request has none.
func (s *Service) AddIdentity(ctx context.Context, req IdentityRequest) (IdentityChange, error) {
	var out IdentityChange
	err := s.change(ctx, "identity.add", "identity "+req.Username, func() error {
		role, err := acl.ParseRole(string(req.Role))
		if err != nil {
			return invalid("%v", err)
		}
		pw, generated, err := passwordOf(req.Password)
		if err != nil {
			return err
		}
		id, err := s.opts.Store.AddIdentity(ctx, req.Username, role, pw)
		if err != nil {
			return err
		}
		out = IdentityChange{Identity: NewIdentity(id), Live: s.opts.Broker != nil}
		if generated {
			out.Password = string(pw)
		}
		return nil
	})
	return out, err
}

// SetDisabled disables or re-enables an identity. Disabling disconnects its
// clients from the embedded broker at once; they cannot log in again.
func (s *Service) SetDisabled(ctx context.Context, username string, disabled bool) (IdentityChange, error) {
	action := "identity.enable"
	if disabled {
		action = "identity.disable"
	}
	var out IdentityChange
	err := s.change(ctx, action, "identity "+username, func() error {
		if err := s.opts.Store.SetDisabled(ctx, username, disabled); err != nil {
			return err
		}
		id, err := s.opts.Store.Identity(ctx, username)
		if err != nil {
			return err
		}
		out = IdentityChange{Identity: NewIdentity(id), Live: s.opts.Broker != nil}
		if disabled {
			out.Disconnected = s.disconnect(username)
		}
		return nil
	})
	return out, err
}

// SetPassword rotates an identity's password (generated, and returned once,
// if the request has none). Connected clients stay unless req.Disconnect.
func (s *Service) SetPassword(ctx context.Context, username string, req PasswordRequest) (IdentityChange, error) {
	var out IdentityChange
	err := s.change(ctx, "identity.password", "identity "+username, func() error {
		pw, generated, err := passwordOf(req.Password)
		if err != nil {
			return err
		}
		if err := s.opts.Store.SetPassword(ctx, username, pw); err != nil {
			return err
		}
		id, err := s.opts.Store.Identity(ctx, username)
		if err != nil {
			return err
		}
		out = IdentityChange{Identity: NewIdentity(id), Live: s.opts.Broker != nil}
		if generated {
			out.Password = string(pw)
		}
		if req.Disconnect {
			out.Disconnected = s.disconnect(username)
		}
		return nil
	})
	return out, err
}

// RemoveIdentity removes an identity and its operator rules, and
// disconnects its clients from the embedded broker.
func (s *Service) RemoveIdentity(ctx context.Context, username string) (IdentityChange, error) {
	var out IdentityChange
	err := s.change(ctx, "identity.remove", "identity "+username, func() error {
		s.rulesMu.Lock()
		defer s.rulesMu.Unlock()
		id, err := s.opts.Store.Identity(ctx, username)
		if err != nil {
			return err
		}
		if err := s.opts.Store.RemoveIdentity(ctx, username); err != nil {
			return err
		}
		out = IdentityChange{Identity: NewIdentity(id), Live: s.opts.Broker != nil}
		out.Disconnected = s.disconnect(username)
		return s.reloadRules(ctx) // its rules went with it
	})
	return out, err
}

// ListUsers lists the users who sign in on the OAuth page, by ID.
func (s *Service) ListUsers(ctx context.Context) ([]User, error) {
	users, err := s.opts.Store.ListUsers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]User, len(users))
	for i, u := range users {
		out[i] = User{ID: u.ID, Created: u.Created.UTC(), Admin: u.Admin}
	}
	return out, nil
}

// AddUser adds a sign-in user, with a generated password (returned once)
// if the request has none.
func (s *Service) AddUser(ctx context.Context, req UserRequest) (UserChange, error) {
	var out UserChange
	err := s.change(ctx, "user.add", "user "+req.User, func() error {
		pw, generated, err := passwordOf(req.Password)
		if err != nil {
			return err
		}
		u, err := s.opts.Store.AddUser(ctx, req.User, pw)
		if err != nil {
			return err
		}
		// Two writes: a failure of the second leaves a user without the
		// role, the safe side; the error says so and the role can be set
		// again (SetUserAdmin).
		if req.Admin {
			if err := s.opts.Store.SetUserAdmin(ctx, u.ID, true); err != nil {
				return fmt.Errorf("added user %s, but not the admin role: %w", u.ID, err)
			}
		}
		out = UserChange{User: User{ID: u.ID, Created: u.Created.UTC(), Admin: req.Admin}}
		if generated {
			out.Password = string(pw)
		}
		return nil
	})
	return out, err
}

// SetUserPassword changes a user's password (generated, and returned once,
// if the request has none). Their tokens stay valid.
func (s *Service) SetUserPassword(ctx context.Context, user string, req PasswordRequest) (UserChange, error) {
	var out UserChange
	err := s.change(ctx, "user.password", "user "+user, func() error {
		pw, generated, err := passwordOf(req.Password)
		if err != nil {
			return err
		}
		if err := s.opts.Store.SetUserPassword(ctx, user, pw); err != nil {
			return err
		}
		out = UserChange{User: User{ID: user}}
		if generated {
			out.Password = string(pw)
		}
		return nil
	})
	return out, err
}

// SetUserAdmin grants or takes back a user's admin role, which lets them
// sign in to the console. Their open console sessions end at their next
// request when the role is taken back.
func (s *Service) SetUserAdmin(ctx context.Context, user string, req UserAdminRequest) (UserChange, error) {
	var out UserChange
	action := "user.admin.revoke"
	if req.Admin {
		action = "user.admin.grant"
	}
	err := s.change(ctx, action, "user "+user, func() error {
		if err := s.opts.Store.SetUserAdmin(ctx, user, req.Admin); err != nil {
			return err
		}
		out = UserChange{User: User{ID: user, Admin: req.Admin}}
		return nil
	})
	return out, err
}

// RemoveUser removes a user and revokes all their tokens and grants.
func (s *Service) RemoveUser(ctx context.Context, user string) (UserChange, error) {
	var out UserChange
	err := s.change(ctx, "user.remove", "user "+user, func() error {
		n, err := s.opts.Store.RemoveUser(ctx, user)
		out = UserChange{User: User{ID: user}, TokensRevoked: n}
		return err
	})
	return out, err
}

// disconnect disconnects username's clients from the embedded broker, if
// there is one.
func (s *Service) disconnect(username string) int {
	if s.opts.Broker == nil {
		return 0
	}
	return s.opts.Broker.Disconnect(username)
}

// passwordOf returns the password to store: pw, or a generated one when
// pw is empty.
func passwordOf(pw string) (_ []byte, generated bool, _ error) {
	if pw == "" {
		g, err := GeneratePassword()
		return []byte(g), true, err
	}
	if len(pw) < MinPasswordLen {
		return nil, false, invalid("password of %d characters: at least %d", len(pw), MinPasswordLen)
	}
	return []byte(pw), false, nil
}

// GeneratePassword returns 32 characters of base64url (192 random bits).
func GeneratePassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
