package server

import (
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/metrics"
)

// observer builds the process's metrics (once the requester and broker are
// up) and returns what the gateway reports to.
func (s *Server) observer() gateway.Observer {
	opts := metrics.Options{Requester: s.requester, Gateway: gatewayRef{s}}
	if s.broker != nil {
		opts.Broker = s.broker
	}
	s.metrics = metrics.New(opts)
	obs := s.withAudit(s.metrics) // server/audit.go
	if s.cfg.Console.Disabled {
		return obs
	}
	s.callStats = console.NewStats() // the console overview's charts
	return gateway.Observers{obs, s.callStats}
}

// Metrics is the process's Prometheus registry, once started.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// gatewayRef reads the gateway's counters at scrape time; the gateway is
// built after its observer.
type gatewayRef struct{ s *Server }

func (g gatewayRef) Stats() gateway.Stats {
	if gw := g.s.gateway; gw != nil {
		return gw.Stats()
	}
	return gateway.Stats{}
}
