package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/metrics"
)

// AuditConfig configures the audit log. Its zero value means the defaults of
// package audit (flush every 500ms, keep 30 days, no row bound).
type AuditConfig struct {
	// FlushInterval is the longest a record waits before it is written: a
	// crash loses at most this much of the log. 0 means 500ms.
	FlushInterval time.Duration
	// Retention is how long records are kept; 0 means 30 days, negative
	// keeps them forever.
	Retention time.Duration
	// MaxRows bounds the records kept (the oldest go first); 0 means no
	// bound.
	MaxRows int64
	// QueueSize bounds the records waiting to be written; beyond it they are
	// dropped and counted (toolbus_audit_dropped_total). 0 means 100000.
	QueueSize int
	// AggregateWindow is the window over which repeated refusals of one
	// kind from one source are counted in one record
	// (audit.Options.AggregateWindow); 0 means 10s, negative records each.
	AggregateWindow time.Duration
}

// auditCloseTimeout bounds the last flush at shutdown. It is not taken from
// the shutdown's context, which a long drain may have used up: the records
// of the calls that drain let finish are the ones most worth keeping.
const auditCloseTimeout = 10 * time.Second

// startAudit starts the audit log's writer on the open store.
func (s *Server) startAudit() error {
	l, err := audit.New(audit.Options{
		Store:           s.store,
		FlushInterval:   s.cfg.Audit.FlushInterval,
		Retention:       s.cfg.Audit.Retention,
		MaxRows:         s.cfg.Audit.MaxRows,
		QueueSize:       s.cfg.Audit.QueueSize,
		AggregateWindow: s.cfg.Audit.AggregateWindow,
		TrustedProxies:  s.cfg.OAuth.TrustedProxies,
		Logger:          s.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	s.audit = l
	return nil
}

// auditBrokerEvents is the embedded broker's Options.Events.
func (s *Server) auditBrokerEvents() func(broker.Event) {
	if s.audit == nil {
		return nil
	}
	return s.audit.BrokerEvent
}

// auditChange is the admin Service's Options.OnChange.
func (s *Server) auditChange() func(admin.Change) {
	if s.audit == nil {
		return nil
	}
	return s.audit.AdminChange
}

// withAudit adds the audit log to the gateway's observers and its counters to
// the metrics. With an external broker, whose logins this process cannot
// see, expert agents' connects and disconnects come from their presence.
func (s *Server) withAudit(m *metrics.Metrics) gateway.Observer {
	if s.audit == nil {
		return m
	}
	l := s.audit
	reg := m.Registry()
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "audit_queue_depth",
			Help: "Audit records waiting to be written (queued or in the batch being written)."},
			func() float64 { return float64(l.Stats().Depth) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "audit_dropped_total",
			Help: "Audit records lost because the queue was full (the store could not keep up) or unwritten at shutdown."},
			func() float64 { return float64(l.Stats().Dropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "audit_written_total",
			Help: "Audit records written to the store."},
			func() float64 { return float64(l.Stats().Written) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "audit_write_errors_total",
			Help: "Audit batches whose write failed (they are retried at the next flush)."},
			func() float64 { return float64(l.Stats().WriteErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "audit_aggregated_total",
			Help: "Refusals counted into an aggregated audit record (--audit-aggregate-window) instead of one record each."},
			func() float64 { return float64(l.Stats().Aggregated) }),
	)
	if s.external() && s.requester != nil {
		l.WatchPresence(s.requester.Agents, time.Second)
	}
	return gateway.Observers{m, l}
}

// closeAudit writes the last records; it runs after the HTTP drain and the
// broker (their last records included), before the store closes.
func (s *Server) closeAudit(ctx context.Context) error {
	if s.audit == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditCloseTimeout)
	defer cancel()
	err := s.audit.Close(ctx)
	s.audit = nil
	return err
}

// Audit is the process's audit log, once started.
func (s *Server) Audit() *audit.Log { return s.audit }
