package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// withAdmin returns the REST API of the gateway: the admin API under
// /api/v1/admin/, api for the rest. Both sit behind the gateway's auth
// middleware; the admin handler checks the admin scope itself.
func (s *Server) withAdmin(api http.Handler) http.Handler {
	adm := s.adminHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, admin.PathPrefix) {
			adm.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// adminService builds the admin Service over the running parts, once: the
// admin API and the console share it. Parts this process does not run
// stay nil interfaces (not typed nils): without an embedded broker,
// /clients answers 501 and identity changes are not live.
func (s *Server) adminService() (*admin.Service, error) {
	if s.adminSvc != nil {
		return s.adminSvc, nil
	}
	opts := admin.Options{Store: s.store, Logger: s.cfg.Logger, ToolScopes: platformtools.ToolScopes()}
	opts.Settings = s.cfg.Settings
	if s.callStats != nil {
		opts.Calls = s.callHistory
	}
	opts.OnChange = s.auditChange()
	// The gateway is built after the Service (its API is this Service's
	// handler); a change reaches it only once it serves.
	opts.ApplyAgentLimits = func(limits map[string]gateway.Limit) {
		if s.gateway != nil {
			s.gateway.SetAgentLimits(limits)
		}
	}
	if s.policy != nil {
		opts.Policy = s.policy
	}
	if s.broker != nil {
		opts.Broker = s.broker
	}
	if s.requester != nil {
		opts.Requester = s.requester
		opts.AgentTools = s.adminAgentTools
	}
	svc, err := admin.NewService(opts)
	if err != nil {
		return nil, err
	}
	s.adminSvc = svc
	return svc, nil
}

// adminHandler is the admin API over adminService.
func (s *Server) adminHandler() http.Handler {
	svc, err := s.adminService()
	if err != nil { // only without a store, which Start opens first
		s.log.WithError(err).Error("admin API disabled")
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":"internal","message":"the admin API is not available"}`, http.StatusInternalServerError)
		})
	}
	return admin.NewHandler(svc)
}

// adminAgentTools lists the expert agents' tools as the admin's token sees
// them, through the gateway's per-token catalog.
func (s *Server) adminAgentTools(ctx context.Context, tok store.Token) ([]admin.AgentTool, error) {
	tools, err := s.gateway.UnionTools(ctx, tok)
	if err != nil {
		return nil, err
	}
	out := make([]admin.AgentTool, len(tools))
	for i, t := range tools {
		out[i] = admin.AgentTool{Name: t.Name, Agent: t.Agent, Title: t.Title, Description: t.Description,
			Qualified: t.Qualified, InputSchema: t.InputSchema, ReadOnly: t.ReadOnly}
		if t.Served != t.Name {
			out[i].Served = t.Served
		}
	}
	return out, nil
}

// callHistory is the console's call history (console.Stats) as the admin
// model shows it.
func (s *Server) callHistory() admin.CallHistory {
	all, list := s.callStats.Hour()
	out := admin.CallHistory{All: callSeries(all), Series: make([]admin.CallSeries, len(list))}
	for i, st := range list {
		out.Series[i] = callSeries(st)
	}
	return out
}

func callSeries(st console.SeriesStats) admin.CallSeries {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := admin.CallSeries{Name: st.Name, Kind: st.Kind, Calls: st.Calls, Errors: st.Errors, Rate: st.Rate,
		RecentP50Ms: ms(st.RecentP50), RecentP99Ms: ms(st.RecentP99), Minutes: make([]admin.CallMinute, len(st.Minutes))}
	for i, m := range st.Minutes {
		out.Minutes[i] = admin.CallMinute{Start: m.Start.UTC(), Seconds: m.Seconds, Calls: m.Calls, Errors: m.Errors, P50Ms: ms(m.P50), P99Ms: ms(m.P99)}
	}
	return out
}

// loadAgentLimits puts the store's per-agent rate limits in force in the
// gateway: at start, before the first request, and on a reload.
func (s *Server) loadAgentLimits(ctx context.Context) error {
	if s.adminSvc == nil { // no admin Service: adminHandler logged why
		return nil
	}
	if err := s.adminSvc.ReloadAgentLimits(ctx); err != nil {
		return fmt.Errorf("agent rate limits: %w", err)
	}
	return nil
}
