// Package requester is the gateway's side of the MQTT contract (package
// contract): a Requester sends MCP requests to the expert agents of a
// context and waits for their answers. It holds one response subscription
// per active context in an LRU that unsubscribes on eviction, a table of
// pending calls matched by correlation ID, deadlines and cancellation, and
// the agents' presence. It reaches the broker through a Bus: the embedded
// broker's in-process client (broker.InlineBus) or a PahoBus to an
// external broker.
package requester
