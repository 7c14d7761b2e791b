package expertagent

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
)

// claimLoop claims the requests that have been in flight for ClaimAfter
// (see contract.ClaimMethod). A ticker at half that period keeps quick
// requests free of any per-call cost; it stops with ctx.
func (a *Agent) claimLoop(ctx context.Context) {
	period := max(a.opts.ClaimAfter/2, 10*time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	var due []*agentCall
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due = a.claimDue(ctx, now, due[:0])
		}
	}
}

// claimDue claims the requests in flight for ClaimAfter at now. due is
// scratch space, returned for the next tick.
func (a *Agent) claimDue(ctx context.Context, now time.Time, due []*agentCall) []*agentCall {
	a.flightMu.Lock()
	for _, c := range a.inflight {
		if now.Sub(c.started) >= a.opts.ClaimAfter {
			due = append(due, c)
		}
	}
	a.flightMu.Unlock()
	for _, c := range due {
		// A claim waits for its PUBACK: while the link is down each
		// would wait agentOpTimeout in turn. They go at a later tick
		// instead, once it is back.
		if !a.link.isOpen() {
			break
		}
		if err := c.claim(ctx); err != nil && ctx.Err() == nil {
			a.log.WithError(err).WithField("correlationId", c.corrID).Debug("claim not sent; trying again")
		}
	}
	return due
}

// claimInFlight claims every request in flight, however young, on a link
// that has just come back (see announce).
func (a *Agent) claimInFlight(ctx context.Context) {
	a.flightMu.Lock()
	calls := make([]*agentCall, 0, len(a.inflight))
	for _, c := range a.inflight {
		calls = append(calls, c)
	}
	a.flightMu.Unlock()
	for _, c := range calls {
		if err := c.claim(ctx); err != nil && ctx.Err() == nil {
			a.log.WithError(err).WithField("correlationId", c.corrID).Debug("claim not sent on reconnect")
		}
	}
}

// maxClaimTries bounds the claims sent for one call: a broker that refuses
// the publish (and drops the connection for it) refuses every retry too.
const maxClaimTries = 3

// claimMessage is the ClaimMethod notification.
var claimMessage = []byte(`{"jsonrpc":"` + jsonrpc.Version + `","method":"` + contract.ClaimMethod + `"}`)

// claim sends the call's claim, unless it went already or the call is
// over. c.mu is held meanwhile, so the final response waits for it: a
// claim never arrives after the answer.
func (c *agentCall) claim(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.claimed || c.claimTries >= maxClaimTries {
		return nil
	}
	c.claimTries++
	// No Envelope.Agent: the reply topic names the instance that claims.
	if err := c.agent.reply(ctx, c.topic, agentEnvelope(c.corrID, claimMessage)); err != nil {
		return fmt.Errorf("claim: %w", err) // not claimed: the next tick tries again
	}
	c.claimed = true
	return nil
}
