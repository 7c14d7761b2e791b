package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolbus/toolbus/jsonrpc"
)

// Limit is a token-bucket rate: PerMinute requests a minute on average,
// up to Burst at once. The zero Limit means no limit; a Burst of 0 with a
// rate means max(1, PerMinute/60), about a second's worth.
type Limit struct {
	PerMinute float64
	Burst     int
}

// ErrLimitSyntax is returned by ParseLimit for text it cannot read.
var ErrLimitSyntax = errors.New(`rate limit must be "PER_MINUTE" or "PER_MINUTE:BURST" (e.g. 600:50), or "" / 0 for none`)

// ParseLimit reads "PER_MINUTE[:BURST]" ("" or "0" means no limit).
func ParseLimit(s string) (Limit, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Limit{}, nil
	}
	perMin, burst, hasBurst := strings.Cut(s, ":")
	var l Limit
	var err error
	if l.PerMinute, err = strconv.ParseFloat(perMin, 64); err != nil || l.PerMinute < 0 || math.IsInf(l.PerMinute, 0) || math.IsNaN(l.PerMinute) {
		return Limit{}, fmt.Errorf("%w: %q", ErrLimitSyntax, s)
	}
	if hasBurst {
		if l.Burst, err = strconv.Atoi(burst); err != nil || l.Burst < 1 {
			return Limit{}, fmt.Errorf("%w: %q: burst must be a whole number >= 1", ErrLimitSyntax, s)
		}
	}
	return l, nil
}

func (l Limit) String() string {
	if l.PerMinute == 0 {
		return "none"
	}
	return fmt.Sprintf("%g/min burst %d", l.PerMinute, l.burst())
}

func (l Limit) burst() int {
	if l.Burst > 0 {
		return l.Burst
	}
	return max(1, int(l.PerMinute/60))
}

// RateLimits are the gateway's request limits. The zero value limits nothing.
type RateLimits struct {
	// PerToken bounds the requests of one token, PerUser those of all of a
	// user's tokens together (every authenticated request: MCP and API).
	PerToken, PerUser Limit
	// AgentTools bounds the tools/call requests the expert agents receive,
	// all callers together: it protects the agents, not the gateway.
	AgentTools Limit
}

// limiters holds one token bucket per key (a token ID, a user ID) for one
// Limit. Buckets idle long enough to be full again are dropped by sweep.
type limiters struct {
	limit Limit
	mu    sync.Mutex
	m     map[string]*limiterEntry
}

type limiterEntry struct {
	lim  *rate.Limiter
	last time.Time
}

func newLimiters(l Limit) *limiters {
	if l.PerMinute <= 0 {
		return nil
	}
	return &limiters{limit: l, m: map[string]*limiterEntry{}}
}

// allow takes one request from key's bucket. When the bucket is empty it
// takes nothing and says how long until a request would pass.
func (ls *limiters) allow(key string) (bool, time.Duration) {
	_, wait := ls.take(key, time.Now())
	return wait == 0, wait
}

// take is allow at now, returning what it took (nil for no limit), which
// the caller may give back (CancelAt) when another limit refuses the
// request after all.
func (ls *limiters) take(key string, now time.Time) (*rate.Reservation, time.Duration) {
	if ls == nil {
		return nil, 0
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e, ok := ls.m[key]
	if !ok {
		e = &limiterEntry{lim: rate.NewLimiter(rate.Limit(ls.limit.PerMinute/60), ls.limit.burst())}
		ls.m[key] = e
	}
	e.last = now
	r := e.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, d
	}
	return r, 0
}

// sweep drops the buckets that have refilled since their last use: a new
// bucket for the key would be the same.
func (ls *limiters) sweep(now time.Time) {
	if ls == nil {
		return
	}
	refill := time.Duration(float64(ls.limit.burst()) / (ls.limit.PerMinute / 60) * float64(time.Second))
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for k, e := range ls.m {
		if now.Sub(e.last) > refill {
			delete(ls.m, k)
		}
	}
}

// SetRateLimits replaces the limits (SIGHUP). Requests already admitted
// are not affected. When the limits change, every bucket starts full; the
// per-agent limits (SetAgentLimits) stay as they are.
func (g *Gateway) SetRateLimits(l RateLimits) {
	for {
		old := g.limits.Load()
		if old.cfg == l {
			return
		}
		rl := newRateLimiter(l)
		rl.agents = old.agents
		// A swap, not a store: a SetAgentLimits in between must not be lost.
		if g.limits.CompareAndSwap(old, rl) {
			return
		}
	}
}

// SetAgentLimits replaces the per-agent limits: the tools/call requests
// one expert agent (by its name on the bus) receives from all callers
// together, beside AgentTools and the per-token and per-user limits. An
// agent absent, or with the zero Limit, has no limit of its own; nil
// removes every one. An agent whose limit is unchanged keeps its bucket,
// so applying the same limits again (after every change) refills nothing.
func (g *Gateway) SetAgentLimits(limits map[string]Limit) {
	for {
		old := g.limits.Load()
		rl := *old // the other buckets are shared, not copied
		rl.agents = old.agents.with(limits)
		if g.limits.CompareAndSwap(old, &rl) {
			return
		}
	}
}

// AgentLimits returns the per-agent limits in force (SetAgentLimits), by
// agent name; an empty map when there are none.
func (g *Gateway) AgentLimits() map[string]Limit {
	out := map[string]Limit{}
	for agent, ls := range g.limits.Load().agents {
		out[agent] = ls.limit
	}
	return out
}

// ParseAgentLimits reads the stored per-agent limit texts
// (store.Store.AgentLimits) for SetAgentLimits. A text ParseLimit refuses
// is left out and named in the error, so that one bad row (a hand-edited
// database) does not lift the others.
func ParseAgentLimits(texts map[string]string) (map[string]Limit, error) {
	out := make(map[string]Limit, len(texts))
	var errs []error
	for agent, text := range texts {
		l, err := ParseLimit(text)
		if err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", agent, err))
			continue
		}
		out[agent] = l
	}
	return out, errors.Join(errs...)
}

// agentLimiters are the per-agent limits: one bucket per agent that has a
// limit of its own, shared by every caller (key ""). The map is never
// changed once built (with builds another), so a call reads it without a
// lock; nil means no per-agent limits.
type agentLimiters map[string]*limiters

// with returns the agentLimiters of limits, reusing the buckets of the
// agents whose limit did not change.
func (al agentLimiters) with(limits map[string]Limit) agentLimiters {
	var out agentLimiters
	for agent, l := range limits {
		ls := al[agent]
		if ls == nil || ls.limit != l {
			if ls = newLimiters(l); ls == nil {
				continue // the zero Limit: none of its own
			}
		}
		if out == nil {
			out = agentLimiters{}
		}
		out[agent] = ls
	}
	return out
}

// rateLimiter applies RateLimits and the per-agent limits.
type rateLimiter struct {
	cfg                     RateLimits
	token, user, agentTools *limiters
	agents                  agentLimiters
}

func newRateLimiter(l RateLimits) *rateLimiter {
	return &rateLimiter{cfg: l, token: newLimiters(l.PerToken), user: newLimiters(l.PerUser), agentTools: newLimiters(l.AgentTools)}
}

// allowAgentCall takes one tools/call to agent from the agent's own limit
// and from AgentTools, or from neither: a call one limit refuses does not
// use up the other's room. what names the limit that refused.
func (rl *rateLimiter) allowAgentCall(agent string) (ok bool, wait time.Duration, what string) {
	if rl.agents == nil && rl.agentTools == nil {
		return true, 0, ""
	}
	now := time.Now()
	own, wait := rl.agents[agent].take("", now)
	if wait > 0 {
		return false, wait, "agent " + agent
	}
	if _, wait := rl.agentTools.take("", now); wait > 0 {
		if own != nil {
			own.CancelAt(now)
		}
		return false, wait, "the expert-agent tools"
	}
	return true, 0, ""
}

func (rl *rateLimiter) sweep(now time.Time) {
	rl.token.sweep(now)
	rl.user.sweep(now)
	rl.agentTools.sweep(now)
	for _, ls := range rl.agents {
		ls.sweep(now)
	}
}

// codeRateLimited is the JSON-RPC error code of a rate-limited request
// (HTTP 429), in the implementation-defined server error range.
const codeRateLimited = -32029

// retryAfterSeconds rounds a wait up to whole seconds, at least 1, as
// Retry-After carries it.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// rateLimited answers 429 with Retry-After. On the MCP endpoint the body is
// a JSON-RPC error response (id null: the request was not read), elsewhere
// the plain error shape.
func (g *Gateway) rateLimited(w http.ResponseWriter, r *http.Request, what string, wait time.Duration) {
	secs := retryAfterSeconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	g.noteRefusal(r, http.StatusTooManyRequests, "rate_limited")
	msg := fmt.Sprintf("rate limit of %s reached; retry after %d s", what, secs)
	g.logger(r.Context()).WithField("limit", what).Info("request refused: rate limited")
	if strings.HasPrefix(r.URL.Path, "/api/v1/mcp") {
		writeJSON(w, http.StatusTooManyRequests, map[string]any{
			"jsonrpc": "2.0", "id": nil,
			"error": map[string]any{"code": codeRateLimited, "message": msg, "data": map[string]any{"retryAfter": secs}},
		})
		return
	}
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "rate_limited", "message": msg, "retryAfter": secs})
}

// tooManySessionsMessage says why errTooManySessions refused a session,
// and what to do.
var tooManySessionsMessage = fmt.Sprintf("the user has too many sessions on this gateway, and this token has none "+
	"to give up; end sessions no longer used (DELETE), or retry after %d s", sessionsFullRetry)

// tooManySessions answers an initialize that errTooManySessions refused
// (HTTP 429 with Retry-After).
func tooManySessions(r *request) answer {
	r.setOutcome(OutcomeRefused, "too_many_sessions")
	data, _ := json.Marshal(map[string]int{"retryAfter": sessionsFullRetry})
	return answer{err: &jsonrpc.Error{Code: codeRateLimited, Message: tooManySessionsMessage, Data: data},
		refusal: refusedTooManySessions, retryAfter: sessionsFullRetry}
}

// rateLimitedCall answers a tools/call that an agent limit refused (what
// names it: the expert-agent tools, or one agent's own) with HTTP 429 and
// Retry-After while no stream has started.
func (g *Gateway) rateLimitedCall(r *request, what string, wait time.Duration) answer {
	secs := retryAfterSeconds(wait)
	r.setOutcome(OutcomeRefused, "rate_limited")
	data, _ := json.Marshal(map[string]int{"retryAfter": secs})
	return answer{err: &jsonrpc.Error{Code: codeRateLimited,
		Message: fmt.Sprintf("rate limit of %s reached; retry after %d s", what, secs), Data: data},
		refusal: refusedRateLimited, retryAfter: secs}
}
