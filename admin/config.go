package admin

import (
	"context"
	"net/http"
)

// Setting is one effective setting of the running process: a flag of
// `toolbus serve`, its value (secrets masked) and where it came from.
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"` // "flag", "env", "file" or "default"
}

// settingList is the body of GET /config.
type settingList struct {
	Settings []Setting `json:"settings"`
}

// Settings returns the process's effective settings; ErrNoServer when the
// Service runs on a data directory.
func (s *Service) Settings(context.Context) ([]Setting, error) {
	if s.opts.Settings == nil {
		return nil, ErrNoServer
	}
	return s.opts.Settings(), nil
}

// Settings is GET /config through the API.
func (c *Client) Settings(ctx context.Context) ([]Setting, error) {
	var out settingList
	err := c.do(ctx, http.MethodGet, "/config", nil, nil, &out)
	return out.Settings, err
}

func (h *Handler) routeConfig(p string) {
	h.router.Handle(p+"/config", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ struct{}) (any, error) {
		st, err := h.svc.Settings(r.Context())
		return settingList{Settings: st}, err
	})).Methods(http.MethodGet)
}
