package broker

// RequestReceivers is the request route's receivers (client IDs) for the
// current subscriptions: empty when requests take mochi's way.
func (b *Broker) RequestReceivers() []string { return b.bus.requestRoute().members }
