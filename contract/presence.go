package contract

import (
	"crypto/rand"
	"encoding/hex"
)

// Presence status values.
const (
	StatusOnline  = "online"
	StatusOffline = "offline"
)

// Presence is the retained payload an agent keeps on PresenceTopic(ClientID):
// "online" while connected, "offline" when it stops (or through its Last
// Will when it dies). An empty retained payload clears the topic.
type Presence struct {
	Status   string `json:"status"`
	ClientID string `json:"clientId"`
	Name     string `json:"name,omitempty"`
	Version  string `json:"version,omitempty"`
	// Since is when the agent entered this status, in Unix milliseconds.
	// A status older than the one a gateway holds for the instance is
	// stale (a replay from another broker node): the newer one wins.
	Since int64 `json:"since,omitempty"`
	// Interval, in milliseconds, is how often an online instance says so
	// again; 0 = never. A gateway takes an instance that has said nothing
	// for ExpiryIntervals of them for gone, as if its Will had come: a
	// broker node's loss sends no Will.
	Interval int64 `json:"interval,omitempty"`
	// Connection names the instance's current connection to the broker
	// (any string, new at each connection; "" = not said). An online
	// status with another connection than the one a gateway holds tells
	// it that the instance was cut off: the calls sent to the instance
	// that it has said nothing of yet were lost, and fail at once. So an
	// instance that still runs calls when it reconnects sends something of
	// each (a claim) before that status.
	Connection string `json:"connection,omitempty"`
}

// ExpiryIntervals is how many of its presence intervals an online instance
// may stay silent before gateways take it for gone.
const ExpiryIntervals = 3

// RandomID returns n random bytes as hex: a valid topic level, and
// unguessable (correlation IDs must be).
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
