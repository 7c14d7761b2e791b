package admin

import (
	"context"
	"net/http"
	"time"
)

// CallMinute is one minute of a series of tool calls (GET /calls).
type CallMinute struct {
	Start time.Time `json:"start"`
	// Seconds is how much of the minute has passed: 60, but for the
	// current minute.
	Seconds float64 `json:"seconds"`
	Calls   int     `json:"calls"`
	Errors  int     `json:"errors"`
	// P50Ms and P99Ms are the latencies of the minute's calls that ran,
	// in milliseconds (0 when none ran).
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
}

// CallSeries is the last hour of the tool calls of one series: the whole
// gateway, the platform tools, one agent, the agents past the bound
// ("other agents"), or the calls of no tool there is ("no such tool").
type CallSeries struct {
	Name string `json:"name"`
	// Kind: all, platform, agent, other or none.
	Kind   string `json:"kind"`
	Calls  int    `json:"calls"`
	Errors int    `json:"errors"`
	// Rate is the calls per second over the last 60 s.
	Rate float64 `json:"rate"`
	// RecentP50Ms and RecentP99Ms are the latencies over the last 5
	// minutes, in milliseconds.
	RecentP50Ms float64 `json:"recentP50Ms"`
	RecentP99Ms float64 `json:"recentP99Ms"`
	// Minutes are the last 60 minutes, oldest first; the last is the
	// current one.
	Minutes []CallMinute `json:"minutes"`
}

// CallHistory is the last hour of tool calls of this process, by minute:
// what the console's overview draws. Errors are the outcomes tool_error,
// timeout and error; refused calls count as calls, not errors.
type CallHistory struct {
	All    CallSeries   `json:"all"`
	Series []CallSeries `json:"series"`
}

// Calls returns the last hour of tool calls, per minute, of this process;
// ErrNoServer without a running gateway (or with the console off, which
// keeps the history).
func (s *Service) Calls(context.Context) (CallHistory, error) {
	if s.opts.Calls == nil {
		return CallHistory{}, ErrNoServer
	}
	h := s.opts.Calls()
	if h.Series == nil {
		h.Series = []CallSeries{}
	}
	return h, nil
}

// Calls is GET /calls through the API.
func (c *Client) Calls(ctx context.Context) (CallHistory, error) {
	var out CallHistory
	return out, c.do(ctx, http.MethodGet, "/calls", nil, nil, &out)
}

func (h *Handler) routeCalls(p string) {
	h.router.Handle(p+"/calls", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ struct{}) (any, error) {
		return h.svc.Calls(r.Context())
	})).Methods(http.MethodGet)
}
