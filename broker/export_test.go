package broker

// RequestReceivers is the request route's receivers (client IDs) for the
// current subscriptions: empty when requests take mochi's way.
func (b *Broker) RequestReceivers() []string { return b.bus.requestRoute().members }

// RepliesRouted reports whether replies go through mochi's topic tree: true
// while some filter there may match a response topic.
func (b *Broker) RepliesRouted() bool { return b.bus.resInTree.Load() }
