package logutil

import (
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Repeats writes log lines that a client can make as often as it likes
// (refused logins, publishes, subscriptions, OAuth requests) without
// letting it fill the log: of the lines of one kind for one key (a client ID, a
// source address), the first is written whole, the rest are counted, and
// each window writes one summary line per key with its count ("acl:
// denied ×N in the last 10s"). A key that had no line in a window is
// forgotten, so the next line for it is written whole again.
//
// It keeps at most maxKeys keys; lines of further keys are counted
// together, in one summary line per window. Callers cut the fields they
// pass (package clip), so what it holds is bounded too. Its timer runs
// only while something is counted; Close stops it.
type Repeats struct {
	log     *logrus.Entry
	window  time.Duration
	maxKeys int

	mu     sync.Mutex
	keys   map[repeatKey]*repeated
	others map[string]*repeated // message -> lines of keys past maxKeys
	timer  *time.Timer          // armed while anything is kept; nil otherwise
	closed bool
}

type repeatKey struct{ msg, key string }

// repeated is what Repeats keeps of one key: the fields its summary
// line names it by, its level, and the lines left out in this window.
type repeated struct {
	fields logrus.Fields
	level  logrus.Level
	n      int64
}

// Defaults of NewRepeats: one summary a key every RepeatWindow, at most
// RepeatKeys keys.
const (
	RepeatWindow = 10 * time.Second
	RepeatKeys   = 256
)

// NewRepeats returns a Repeats writing to log (nil: nowhere) that sums up
// every window, for at most maxKeys keys; 0 means RepeatWindow and
// RepeatKeys.
func NewRepeats(log *logrus.Entry, window time.Duration, maxKeys int) *Repeats {
	if window <= 0 {
		window = RepeatWindow
	}
	if maxKeys <= 0 {
		maxKeys = RepeatKeys
	}
	return &Repeats{log: OrDiscard(log), window: window, maxKeys: maxKeys,
		keys: make(map[repeatKey]*repeated), others: make(map[string]*repeated)}
}

// Line writes msg at level with fields, unless a line of msg for key was
// written in this window: then it counts it for the summary. key names
// what the lines are counted by; fields are written as given (cut them)
// and the summary names the key by keyFields.
func (r *Repeats) Line(level logrus.Level, msg, key string, keyFields, fields logrus.Fields) {
	if !r.log.Logger.IsLevelEnabled(level) {
		return
	}
	k := repeatKey{msg, key}
	r.mu.Lock()
	if c, ok := r.keys[k]; ok {
		c.n++
		r.mu.Unlock()
		return
	}
	if len(r.keys) >= r.maxKeys {
		o, ok := r.others[msg]
		if !ok {
			o = &repeated{fields: logrus.Fields{"keys": "others"}, level: level}
			r.others[msg] = o
		}
		o.n++
		r.armLocked()
		r.mu.Unlock()
		return
	}
	r.keys[k] = &repeated{fields: keyFields, level: level}
	r.armLocked()
	r.mu.Unlock()
	r.log.WithFields(fields).Log(level, msg)
}

func (r *Repeats) armLocked() {
	if r.timer == nil && !r.closed {
		r.timer = time.AfterFunc(r.window, r.flush)
	}
}

// summary is one line flush writes.
type summary struct {
	msg    string
	fields logrus.Fields
	level  logrus.Level
	n      int64
}

// flush writes the summary lines of the window that ended and forgets the
// keys that had none. It runs on the timer's goroutine, and from Close.
func (r *Repeats) flush() {
	r.mu.Lock()
	var out []summary
	for k, c := range r.keys {
		if c.n == 0 {
			delete(r.keys, k)
			continue
		}
		out = append(out, summary{msg: k.msg, fields: c.fields, level: c.level, n: c.n})
		c.n = 0
	}
	for msg, o := range r.others {
		out = append(out, summary{msg: msg, fields: o.fields, level: o.level, n: o.n})
	}
	clear(r.others)
	r.timer = nil
	if len(r.keys) > 0 {
		r.armLocked()
	}
	r.mu.Unlock()
	for _, s := range out {
		r.log.WithFields(s.fields).WithField("repeated", s.n).
			Log(s.level, fmt.Sprintf("%s ×%d in the last %s", s.msg, s.n, r.window))
	}
}

// Close writes what is counted and arms no timer again. Lines after it are
// written as before, their repeats counted but never summed up.
func (r *Repeats) Close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.flush()
}
