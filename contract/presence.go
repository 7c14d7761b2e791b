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
	Since int64 `json:"since,omitempty"`
}

// RandomID returns n random bytes as hex: a valid topic level, and
// unguessable (correlation IDs must be).
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
