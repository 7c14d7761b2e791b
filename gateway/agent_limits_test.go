package gateway

import (
	"errors"
	"maps"
	"testing"
)

// TestAgentLimits: an agent's own limit holds across callers and leaves
// other agents alone; with AgentTools the stricter refuses, and a call one
// limit refuses takes nothing from the other; setting the same limits again
// refills nothing, a SIGHUP reload keeps them, nil removes them.
func TestAgentLimits(t *testing.T) {
	g := &Gateway{}
	g.limits.Store(newRateLimiter(RateLimits{AgentTools: Limit{PerMinute: 60, Burst: 4}}))
	limits := map[string]Limit{"slow": {PerMinute: 60, Burst: 2}, "one": {PerMinute: 1, Burst: 1}, "free": {}}
	g.SetAgentLimits(limits)
	if got := g.AgentLimits(); !maps.Equal(got, map[string]Limit{"slow": limits["slow"], "one": limits["one"]}) {
		t.Fatalf("AgentLimits = %v; want slow's and one's (the zero Limit is none)", got)
	}
	allow := func(agent string) (bool, string) {
		ok, _, what := g.limits.Load().allowAgentCall(agent)
		return ok, what
	}
	for i := range 2 {
		if ok, what := allow("slow"); !ok {
			t.Fatalf("call %d to slow refused by %s", i+1, what)
		}
	}
	if ok, what := allow("slow"); ok || what != "agent slow" {
		t.Fatalf("3rd call to slow: ok=%v by %q; want refused by its own limit", ok, what)
	}
	// The refused call took nothing from AgentTools: two more fit there.
	for i := range 2 {
		if ok, what := allow("free"); !ok {
			t.Fatalf("call %d to free refused by %s", i+1, what)
		}
	}
	if ok, what := allow("free"); ok || what != "the expert-agent tools" {
		t.Fatalf("5th agent call: ok=%v by %q; want refused by AgentTools", ok, what)
	}
	// AgentTools refuses a call its own limit let through: one's single
	// request is given back, not spent.
	if ok, what := allow("one"); ok || what != "the expert-agent tools" {
		t.Fatalf("call to one: ok=%v by %q; want refused by AgentTools", ok, what)
	}

	// The same limits again, and a reload of the others: the per-agent
	// buckets stay as they were.
	g.SetAgentLimits(limits)
	g.SetRateLimits(RateLimits{})
	if ok, _ := allow("slow"); ok {
		t.Fatal("slow's bucket refilled when its limit was set again unchanged, or lost on SetRateLimits")
	}
	if ok, what := allow("one"); !ok {
		t.Fatalf("one refused by %s: the call AgentTools refused used up its room", what)
	}
	if ok, what := allow("free"); !ok {
		t.Fatalf("free refused by %s after AgentTools was lifted", what)
	}
	// A changed limit starts full.
	g.SetAgentLimits(map[string]Limit{"slow": {PerMinute: 60, Burst: 3}})
	if ok, _ := allow("slow"); !ok {
		t.Fatal("slow refused right after its limit changed")
	}
	g.SetAgentLimits(nil)
	for range 5 {
		if ok, what := allow("slow"); !ok {
			t.Fatalf("slow refused by %s with no limits", what)
		}
	}
}

func TestParseAgentLimits(t *testing.T) {
	got, err := ParseAgentLimits(map[string]string{"a": "600:50", "b": "60", "c": "fast", "d": ""})
	if want := map[string]Limit{"a": {PerMinute: 600, Burst: 50}, "b": {PerMinute: 60}, "d": {}}; !maps.Equal(got, want) {
		t.Errorf("ParseAgentLimits = %v, want %v", got, want)
	}
	if !errors.Is(err, ErrLimitSyntax) {
		t.Errorf("error %v, want ErrLimitSyntax for c", err)
	}
}
