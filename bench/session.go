package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// session is one MCP session (or, on the stateless wire, one client): the
// headers every call of it carries, built once.
type session struct {
	c       *caller
	tmpl    *http.Request // method, URL and headers of a tools/call
	rawHead []byte        // tmpl encoded for the raw client
	id      string        // Mcp-Session-Id; "" when the server gave none
	version string        // negotiated protocol version
}

// request returns a tools/call request with body. It copies the template
// struct instead of building a request, so no URL is parsed and no header
// map is built per call; the header map is shared read-only.
func (s *session) request(ctx context.Context, body []byte) *http.Request {
	r := s.tmpl.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return r
}

func (c *caller) baseHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.opts.Token != "" {
		h.Set("Authorization", "Bearer "+c.opts.Token)
	}
	return h
}

// openSessions sets up opts.Sessions sessions one after another. Setup is
// not measured.
func (c *caller) openSessions(ctx context.Context) ([]*session, error) {
	sessions := make([]*session, 0, c.opts.Sessions)
	for i := range c.opts.Sessions {
		s, err := c.openSession(ctx)
		if err != nil {
			return sessions, fmt.Errorf("%w: session %d of %d: %w", ErrSetup, i+1, c.opts.Sessions, err)
		}
		sessions = append(sessions, s)
	}
	return sessions, nil
}

func (c *caller) openSession(ctx context.Context) (*session, error) {
	s := &session{c: c, version: c.opts.ProtocolVersion}
	if isModern(s.version) {
		if err := c.discover(ctx, s.version); err != nil {
			return nil, err
		}
	} else {
		if err := c.initialize(ctx, s); err != nil {
			return nil, err
		}
	}
	h := c.baseHeader()
	h.Set(headerProtocolVersion, s.version)
	if s.id != "" {
		h.Set(headerSessionID, s.id)
	}
	if isModern(s.version) {
		h.Set(headerMethod, c.opts.Method)
		if c.opts.Method == MethodToolsCall {
			h.Set(headerName, c.opts.Tool)
		}
	}
	tmpl, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url.String(), nil)
	if err != nil {
		return nil, err
	}
	tmpl.Header = h
	s.tmpl = tmpl
	s.rawHead = rawHead(s)
	return s, nil
}

// exchange posts one setup message and returns the response, its body read.
func (c *caller) exchange(ctx context.Context, h http.Header, msg any) (*http.Response, []byte, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url.String(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = h
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	return resp, drain(resp), nil
}

// request returns a JSON-RPC request with id 0.
func rpcRequest(method string, params any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": 0, "method": method, "params": params}
}

// initialize opens a legacy session: initialize (without an
// MCP-Protocol-Version header, as the official clients send it), then
// notifications/initialized.
func (c *caller) initialize(ctx context.Context, s *session) error {
	resp, body, err := c.exchange(ctx, c.baseHeader(), rpcRequest("initialize", map[string]any{
		"protocolVersion": s.version,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": "toolbus-bench", "version": "1"},
	}))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("initialize: %w %d: %.200s", ErrHTTPStatus, resp.StatusCode, body)
	}
	r, err := findResponse(resp.Header.Get("Content-Type"), body, []byte("0"))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if r.Error != nil {
		return fmt.Errorf("initialize: %w %d: %s", ErrRPC, r.Error.Code, r.Error.Message)
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(r.Result, &init); err != nil || init.ProtocolVersion == "" {
		return fmt.Errorf("initialize: %w: no protocolVersion in %.200s", ErrBadResponse, r.Result)
	}
	s.version = init.ProtocolVersion
	s.id = resp.Header.Get(headerSessionID)

	h := c.baseHeader()
	h.Set(headerProtocolVersion, s.version)
	if s.id != "" {
		h.Set(headerSessionID, s.id)
	}
	resp, body, err = c.exchange(ctx, h, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	if err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("notifications/initialized: %w %d: %.200s", ErrHTTPStatus, resp.StatusCode, body)
	}
	return nil
}

// discover checks that a stateless server speaks version, the way a 2026
// client connects.
func (c *caller) discover(ctx context.Context, version string) error {
	h := c.baseHeader()
	h.Set(headerProtocolVersion, version)
	h.Set(headerMethod, "server/discover")
	resp, body, err := c.exchange(ctx, h, rpcRequest("server/discover", map[string]any{"_meta": modernMeta(version)}))
	if err != nil {
		return fmt.Errorf("server/discover: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("server/discover: %w %d: %.200s", ErrHTTPStatus, resp.StatusCode, body)
	}
	r, err := findResponse(resp.Header.Get("Content-Type"), body, []byte("0"))
	if err != nil {
		return fmt.Errorf("server/discover: %w", err)
	}
	if r.Error != nil {
		return fmt.Errorf("server/discover: %w %d: %s", ErrRPC, r.Error.Code, r.Error.Message)
	}
	var d struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(r.Result, &d); err != nil {
		return fmt.Errorf("server/discover: %w: %v", ErrBadResponse, err)
	}
	if !slices.Contains(d.SupportedVersions, version) {
		return fmt.Errorf("server/discover: server supports %v, not %s", d.SupportedVersions, version)
	}
	return nil
}

// closeSessions ends the sessions that have an id with DELETE, best effort
// and bounded, so that servers that keep per-session state (and goroutines)
// release it before the next scenario.
func (c *caller) closeSessions(sessions []*session) {
	for _, s := range sessions {
		if err := c.deleteSession(context.Background(), s); err != nil {
			c.opts.Logger.WithError(err).Debug("closing session")
		}
	}
}

// deleteSession ends s with DELETE, within 2s; a session without an id has
// nothing to end.
func (c *caller) deleteSession(ctx context.Context, s *session) error {
	if s.id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url.String(), nil)
	if err != nil {
		return err
	}
	h := c.baseHeader()
	h.Set(headerProtocolVersion, s.version)
	h.Set(headerSessionID, s.id)
	req.Header = h
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	body := drain(resp)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("DELETE: %w %d: %.200s", ErrHTTPStatus, resp.StatusCode, body)
	}
	return nil
}
