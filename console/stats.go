package console

import (
	"net/http"
	"time"

	"github.com/toolbus/toolbus/gateway"
)

// Stats keeps the recent history of tool calls for the overview's charts.
// It is a gateway.Observer.
type Stats struct{}

// NewStats returns an empty Stats.
func NewStats() *Stats { return &Stats{} }

var _ gateway.Observer = (*Stats)(nil)

// ToolCall implements gateway.Observer.
func (s *Stats) ToolCall(tc *gateway.ToolCall) {}

// Refused implements gateway.Observer.
func (s *Stats) Refused(*http.Request, int, string) {}

// Request implements gateway.Observer.
func (s *Stats) Request(string, time.Duration) {}

// AgentRequest implements gateway.Observer.
func (s *Stats) AgentRequest(string, time.Duration, error) {}
