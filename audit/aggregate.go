package audit

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/store"
)

// Defaults of the aggregation of refusals (Options.AggregateWindow,
// AggregateAfter, AggregateKeys).
const (
	DefaultAggregateWindow = 10 * time.Second
	DefaultAggregateAfter  = 5
	DefaultAggregateKeys   = 1000
)

// reasonClassLen bounds the part of a reason that tells refusals apart:
// beyond it, and from the first quote on, a reason holds what the client
// sent (a client ID, a redirect URI, a decoder's complaint about its
// body), and a key made of that would let a client escape aggregation by
// varying it.
const reasonClassLen = 64

// aggregateKeysPerSource bounds the keys one source holds in a window;
// beyond it, the source's refusals of a kind are counted under one key of
// its own. So the AggregateKeys table is filled only by many sources, and
// one source alone cannot push everyone else's refusals into the overflow
// record, which names no source.
const aggregateKeysPerSource = 16

// aggKey is what makes refusals "the same": their kind, what was refused,
// the class of the reason, who (only when authenticated: a name a client
// chooses freely cannot be part of the key) and where from.
type aggKey struct {
	kind, action, reason, who, source string
	status                            int
	others                            bool // the source's refusals beyond aggregateKeysPerSource
}

// aggBucket counts the refusals of one key in the current window.
type aggBucket struct {
	seen int // refusals of the key in this window, recorded or counted
	n    int // those counted into sum instead of recorded
	// sum is the record that stands for the counted ones: the first of
	// them, with every field in which a later one differed emptied.
	sum    store.AuditEvent
	source string
	mixed  bool // sum.Reason is cut to the class the merged reasons share
}

// aggregator turns a flood of refusals into a few records: per key and
// window, the first `after` are recorded one by one and the rest counted
// into one record, written when the window ends. At most maxKeys keys are
// tracked in a window, at most aggregateKeysPerSource of them (and one per
// kind for the rest) a source's; refusals of further keys are counted into
// one record per kind, so memory and records stay bounded whatever the
// sources.
type aggregator struct {
	window         time.Duration
	after, maxKeys int

	mu       sync.Mutex
	closed   bool
	keys     map[aggKey]*aggBucket
	perSrc   map[string]int        // keys of each source in keys
	overflow map[string]*aggBucket // by kind
}

func newAggregator(window time.Duration, after, maxKeys int) *aggregator {
	return &aggregator{window: window, after: after, maxKeys: maxKeys,
		keys: map[aggKey]*aggBucket{}, perSrc: map[string]int{}, overflow: map[string]*aggBucket{}}
}

// aggregatable reports whether e is a refusal a client can cause at will:
// an HTTP request refused before it ran, an MQTT login or publish
// refused, a refused OAuth step.
func aggregatable(e *store.AuditEvent) bool {
	if e.Outcome != gateway.OutcomeRefused {
		return false
	}
	switch e.Kind {
	case store.AuditRefused, store.AuditMQTTDenied, store.AuditOAuth:
		return true
	}
	return false
}

// reasonClass is the part of reason that keys a refusal.
func reasonClass(reason string) string {
	if i := strings.IndexAny(reason, "\"'"); i >= 0 {
		reason = reason[:i]
	}
	return clip.String(reason, reasonClassLen)
}

// httpMethod is the Action of a refused request: its method if HTTP
// defines it, else "other". The method is the client's to choose, and
// each distinct one would be a key of its own.
func httpMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "other"
}

// add counts e (already clipped) under k, and reports whether it is to be
// recorded by itself.
func (a *aggregator) add(e *store.AuditEvent, k aggKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return true // the Log's own closing counts it if it is too late
	}
	b := a.keys[k]
	if b == nil && a.perSrc[k.source] >= aggregateKeysPerSource {
		k = aggKey{kind: k.kind, source: k.source, others: true}
		b = a.keys[k]
	}
	if b == nil {
		if len(a.keys) >= a.maxKeys {
			b = a.overflow[k.kind]
			if b == nil {
				b = &aggBucket{}
				a.overflow[k.kind] = b
			}
			b.merge(e)
			return false
		}
		b = &aggBucket{source: k.source}
		a.keys[k] = b
		a.perSrc[k.source]++
	}
	b.seen++
	if b.seen <= a.after {
		return true
	}
	b.merge(e)
	return false
}

// merge counts e into the bucket's record.
func (b *aggBucket) merge(e *store.AuditEvent) {
	b.n++
	if b.n == 1 {
		b.sum = *e
		return
	}
	s := &b.sum
	for _, f := range []struct {
		sum *string
		v   string
	}{
		{&s.TokenID, e.TokenID}, {&s.UserID, e.UserID}, {&s.ClientID, e.ClientID}, {&s.SessionID, e.SessionID},
		{&s.EntityType, e.EntityType}, {&s.EntityID, e.EntityID}, {&s.Tool, e.Tool}, {&s.Source, e.Source},
		{&s.Action, e.Action}, {&s.Target, e.Target}, {&s.RequestID, e.RequestID},
	} {
		if *f.sum != f.v {
			*f.sum = ""
		}
	}
	if !b.mixed && s.Reason != e.Reason {
		s.Reason = reasonClass(s.Reason) + "…"
		b.mixed = true
	}
	if s.Status != e.Status {
		s.Status = 0
	}
}

// flush returns the records of the window that ended and starts the next.
func (a *aggregator) flush() []store.AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.takeLocked()
}

// close returns the last window's records; later refusals are recorded
// one by one (and dropped, counted, once the Log is closed).
func (a *aggregator) close() []store.AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	return a.takeLocked()
}

func (a *aggregator) takeLocked() []store.AuditEvent {
	var out []store.AuditEvent
	for _, b := range a.keys {
		if b.n == 0 {
			continue
		}
		e := b.sum
		e.Reason = withCount(e.Reason, fmt.Sprintf(" (×%d more from %s in %v)", b.n, orUnknown(b.source), a.window))
		out = append(out, e)
	}
	for _, b := range a.overflow {
		e := b.sum
		e.Reason = withCount(e.Reason, fmt.Sprintf(" (×%d more from sources beyond the %d tracked, in %v)", b.n, a.maxKeys, a.window))
		out = append(out, e)
	}
	clear(a.keys)
	clear(a.perSrc)
	clear(a.overflow)
	return out
}

// withCount appends suffix to reason, cutting reason so that the whole
// stays within maxField.
func withCount(reason, suffix string) string {
	return clip.String(reason, maxField-len(suffix)) + suffix
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown source"
	}
	return s
}
