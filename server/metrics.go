package server

import (
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/h1"
	"github.com/toolbus/toolbus/metrics"
)

// observer builds the process's metrics (once the requester and broker are
// up) and returns what the gateway reports to.
func (s *Server) observer() gateway.Observer {
	opts := metrics.Options{Requester: s.requester, Gateway: gatewayRef{s}, HTTP: httpRef{s}}
	if s.broker != nil {
		opts.Broker = s.broker
	}
	s.metrics = metrics.New(opts)
	return s.withAudit(s.metrics) // server/audit.go
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

// httpRef reads the HTTP server's counters at scrape time; the server is
// built after the metrics.
type httpRef struct{ s *Server }

func (h httpRef) Stats() h1.Stats {
	if srv := h.s.httpStats.Load(); srv != nil {
		return srv.Stats()
	}
	return h1.Stats{}
}
