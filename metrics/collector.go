package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// statsCollector turns the components' own counters into metrics at scrape
// time. Descriptions are unchecked (Describe sends none): which metrics
// exist depends on which sources Options holds.
type statsCollector struct {
	opts Options
}

func (c *statsCollector) Describe(chan<- *prometheus.Desc) {}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(name, help string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc(name, help), prometheus.CounterValue, v, labels...)
	}
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(desc(name, help), prometheus.GaugeValue, v)
	}
	if r := c.opts.Requester; r != nil {
		s := r.Stats()
		gauge("pending_calls", "Expert-agent requests waiting for their answer.", float64(s.Pending))
		gauge("contexts", "Per-context response subscriptions held in the LRU.", float64(s.Contexts))
		gauge("contexts_pinned", "Contexts held over the LRU bound because calls are in flight.", float64(s.Pinned))
		counter("context_cache_hits_total", "Context lookups that found the response subscription.", float64(s.Hits))
		counter("context_cache_misses_total", "Context lookups that had to subscribe.", float64(s.Misses))
		counter("context_evictions_total", "Contexts dropped because the LRU was full.", float64(s.Evictions))
		counter("context_expirations_total", "Contexts dropped after their idle TTL.", float64(s.Expired))
		counter("context_subscribes_total", "Response-topic subscribes.", float64(s.Subscribes))
		counter("context_subscribe_errors_total", "Response-topic subscribes that failed.", float64(s.SubscribeErrors))
		counter("context_unsubscribes_total", "Response-topic unsubscribes (failed ones included).", float64(s.Unsubscribes))
		counter("context_unsubscribe_errors_total", "Response-topic unsubscribes that failed.", float64(s.UnsubscribeErrors))
		discarded := desc("agent_replies_discarded_total",
			"Replies from expert agents that completed no call, by kind: malformed, late (no open call), duplicate (a call already answered, whoever sends it), mismatched (an open call's correlationId from another agent, or on another context's topic), interim_overflow.", "kind")
		for kind, v := range map[string]uint64{"malformed": s.Dropped, "late": s.Late, "duplicate": s.Duplicates, "mismatched": s.Mismatched, "interim_overflow": s.InterimDropped} {
			ch <- prometheus.MustNewConstMetric(discarded, prometheus.CounterValue, float64(v), kind)
		}
		ignored := desc("agent_presence_ignored_total",
			"Presence messages the gateway ignored, by reason: too_large (over 4 KiB), instance_limit (the agent had --max-agent-instances already).", "reason")
		for reason, v := range map[string]uint64{"too_large": s.PresenceTooLarge, "instance_limit": s.InstancesRefused} {
			ch <- prometheus.MustNewConstMetric(ignored, prometheus.CounterValue, float64(v), reason)
		}
		online := 0
		for _, a := range r.Agents() {
			if a.Online {
				online++
			}
		}
		gauge("agents_online", "Expert agents whose presence says online.", float64(online))
	}
	if g := c.opts.Gateway; g != nil {
		s := g.Stats()
		gauge("mcp_sessions", "Live MCP sessions held by this replica.", float64(s.Sessions))
		counter("agent_tool_list_failures_total", "tools/list answers given without the expert agents' tools because they did not answer in time.", float64(s.AgentListFailures))
		counter("agent_tool_lists_fetched_total", "tools/list answers asked of expert agents (all pages of one answer count once).", float64(s.AgentListsFetched))
		leftOut := desc("agent_tools_left_out_total",
			"Expert-agent tools left out of the union, by reason: invalid_name, duplicate, too_large, too_many, name_taken; pages_not_fetched counts answers cut short.", "reason")
		for reason, v := range s.AgentToolsLeftOut {
			ch <- prometheus.MustNewConstMetric(leftOut, prometheus.CounterValue, float64(v), reason)
		}
	}
	if b := c.opts.Broker; b != nil {
		s := b.Stats()
		gauge("broker_clients", "Network clients connected to the embedded broker.", float64(s.ClientsConnected))
		gauge("broker_subscriptions", "Subscriptions in the embedded broker's topic tree (the gateway's per-context ones are held apart).", float64(s.Subscriptions))
		gauge("broker_inflight", "QoS 1/2 messages of the embedded broker waiting for acknowledgement.", float64(s.Inflight))
		counter("broker_messages_received_total", "PUBLISH packets the embedded broker received.", float64(s.MessagesReceived))
		counter("broker_messages_sent_total", "PUBLISH packets the embedded broker sent to network clients.", float64(s.MessagesSent))
		counter("broker_messages_dropped_total", "Messages the embedded broker dropped for a slow subscriber.", float64(s.MessagesDropped))
		counter("broker_received_bytes_total", "Bytes the embedded broker received.", float64(s.BytesReceived))
		counter("broker_sent_bytes_total", "Bytes the embedded broker sent.", float64(s.BytesSent))
	}
	for name, g := range c.opts.Gauges {
		gauge(name, g.Help, g.Value())
	}
}
