package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ClientOptions configures a Client. The zero value is usable.
type ClientOptions struct {
	// HTTPClient makes the requests; nil means one with Timeout.
	HTTPClient *http.Client
	// Timeout bounds one request when HTTPClient is nil; 0 means 30s.
	Timeout time.Duration
}

// Client is the admin API's Go client: the same methods, arguments and
// answers as Service, over HTTP. Errors from the server are *APIError.
type Client struct {
	base  string // scheme://host[:port], no trailing slash
	token string
	http  *http.Client
}

// maxAnswerBytes bounds an answer: a list of every token or context of a
// large installation fits.
const maxAnswerBytes = 64 << 20

// NewClient returns a Client for the toolbus at serverURL (e.g.
// "http://127.0.0.1:8080") that authenticates with token.
func NewClient(serverURL, token string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: server URL %q: want http(s)://host:port", ErrInvalidRequest, serverURL)
	}
	if token == "" {
		return nil, fmt.Errorf("%w: the admin API needs a token with the admin scope", ErrInvalidRequest)
	}
	hc := opts.HTTPClient
	if hc == nil {
		if opts.Timeout <= 0 {
			opts.Timeout = 30 * time.Second
		}
		hc = &http.Client{Timeout: opts.Timeout}
	}
	base := strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/")
	return &Client{base: base, token: token, http: hc}, nil
}

// do sends one request; in (if not nil) is the JSON body, out (if not nil)
// receives the JSON answer.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("admin API: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	u := c.base + strings.TrimSuffix(PathPrefix, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("admin API: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Code == "" {
			e.Code, e.Message = "", fmt.Sprintf("admin API: %s %s: HTTP %s", method, path, resp.Status)
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("admin API: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

func seg(s string) string { return url.PathEscape(s) }

// ListTokens is Service.ListTokens over HTTP.
func (c *Client) ListTokens(ctx context.Context, user string) ([]Token, error) {
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	var out tokenList
	return out.Tokens, c.do(ctx, http.MethodGet, "/tokens", q, nil, &out)
}

// CreateToken is Service.CreateToken over HTTP.
func (c *Client) CreateToken(ctx context.Context, req TokenRequest) (CreatedToken, error) {
	var out CreatedToken
	return out, c.do(ctx, http.MethodPost, "/tokens", nil, req, &out)
}

// RevokeToken is Service.RevokeToken over HTTP.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/tokens/"+seg(id), nil, nil, nil)
}

// ListUserAgents is Service.ListUserAgents over HTTP.
func (c *Client) ListUserAgents(ctx context.Context) ([]UserAgents, error) {
	var out userAgentsList
	return out.Users, c.do(ctx, http.MethodGet, "/users/agents", nil, nil, &out)
}

// SetUserAgents is Service.SetUserAgents over HTTP.
func (c *Client) SetUserAgents(ctx context.Context, user string, req UserAgentsRequest) (UserAgents, error) {
	var out UserAgents
	return out, c.do(ctx, http.MethodPut, "/users/"+seg(user)+"/agents", nil, req, &out)
}

// ListUsers is Service.ListUsers over HTTP.
func (c *Client) ListUsers(ctx context.Context) ([]User, error) {
	var out userList
	return out.Users, c.do(ctx, http.MethodGet, "/users", nil, nil, &out)
}

// AddUser is Service.AddUser over HTTP.
func (c *Client) AddUser(ctx context.Context, req UserRequest) (UserChange, error) {
	var out UserChange
	return out, c.do(ctx, http.MethodPost, "/users", nil, req, &out)
}

// SetUserPassword is Service.SetUserPassword over HTTP.
func (c *Client) SetUserPassword(ctx context.Context, user string, req PasswordRequest) (UserChange, error) {
	var out UserChange
	return out, c.do(ctx, http.MethodPost, "/users/"+seg(user)+"/password", nil, req, &out)
}

// SetUserAdmin is Service.SetUserAdmin over HTTP.
func (c *Client) SetUserAdmin(ctx context.Context, user string, req UserAdminRequest) (UserChange, error) {
	var out UserChange
	return out, c.do(ctx, http.MethodPut, "/users/"+seg(user)+"/admin", nil, req, &out)
}

// RemoveUser is Service.RemoveUser over HTTP.
func (c *Client) RemoveUser(ctx context.Context, user string) (UserChange, error) {
	var out UserChange
	return out, c.do(ctx, http.MethodDelete, "/users/"+seg(user), nil, nil, &out)
}

// ListIdentities is Service.ListIdentities over HTTP.
func (c *Client) ListIdentities(ctx context.Context) ([]Identity, error) {
	var out identityList
	return out.Identities, c.do(ctx, http.MethodGet, "/identities", nil, nil, &out)
}

// AddIdentity is Service.AddIdentity over HTTP.
func (c *Client) AddIdentity(ctx context.Context, req IdentityRequest) (IdentityChange, error) {
	var out IdentityChange
	return out, c.do(ctx, http.MethodPost, "/identities", nil, req, &out)
}

// SetDisabled is Service.SetDisabled over HTTP.
func (c *Client) SetDisabled(ctx context.Context, username string, disabled bool) (IdentityChange, error) {
	action := "/enable"
	if disabled {
		action = "/disable"
	}
	var out IdentityChange
	return out, c.do(ctx, http.MethodPost, "/identities/"+seg(username)+action, nil, nil, &out)
}

// SetPassword is Service.SetPassword over HTTP.
func (c *Client) SetPassword(ctx context.Context, username string, req PasswordRequest) (IdentityChange, error) {
	var out IdentityChange
	return out, c.do(ctx, http.MethodPost, "/identities/"+seg(username)+"/password", nil, req, &out)
}

// RemoveIdentity is Service.RemoveIdentity over HTTP.
func (c *Client) RemoveIdentity(ctx context.Context, username string) (IdentityChange, error) {
	var out IdentityChange
	return out, c.do(ctx, http.MethodDelete, "/identities/"+seg(username), nil, nil, &out)
}

// ListRules is Service.ListRules over HTTP.
func (c *Client) ListRules(ctx context.Context) ([]Rule, error) {
	var out ruleList
	return out.Rules, c.do(ctx, http.MethodGet, "/rules", nil, nil, &out)
}

// AddRule is Service.AddRule over HTTP.
func (c *Client) AddRule(ctx context.Context, req RuleRequest) (Rule, error) {
	var out Rule
	return out, c.do(ctx, http.MethodPost, "/rules", nil, req, &out)
}

// RemoveRule is Service.RemoveRule over HTTP.
func (c *Client) RemoveRule(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/rules/"+seg(id), nil, nil, nil)
}

// Clients is Service.Clients over HTTP.
func (c *Client) Clients(ctx context.Context) ([]MQTTClient, error) {
	var out clientList
	return out.Clients, c.do(ctx, http.MethodGet, "/clients", nil, nil, &out)
}

// Agents is Service.Agents over HTTP; the tools are those the Client's
// token sees.
func (c *Client) Agents(ctx context.Context) (Agents, error) {
	var out Agents
	return out, c.do(ctx, http.MethodGet, "/agents", nil, nil, &out)
}

// Contexts is Service.Contexts over HTTP.
func (c *Client) Contexts(ctx context.Context, user string) ([]Context, error) {
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	var out contextList
	return out.Contexts, c.do(ctx, http.MethodGet, "/contexts", q, nil, &out)
}

// EvictContext is Service.EvictContext over HTTP.
func (c *Client) EvictContext(ctx context.Context, key string) error {
	if _, err := ParseContextKey(key); err != nil {
		return err // each part becomes a path segment: check them here
	}
	return c.do(ctx, http.MethodDelete, "/contexts/"+key, nil, nil, nil)
}
