package acl

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The helpers in this file run on the broker's hot path (every publish and
// subscribe goes through Policy.Allow), so they walk topics level by level
// with index arithmetic instead of strings.Split: substrings of the input
// never allocate.

const (
	// ReservedPrefix starts the topic tree of the MQTT contract (v2): the
	// requests, replies and presence under ff/v2/mcp/ and the probes under
	// ff/v2/probe/. Only the built-in rules grant anything under it.
	ReservedPrefix = "ff/v2/"

	// v1Prefix is the tree of contract v1. It stays reserved but nothing
	// grants anything there, so that a v1 agent or gateway left running is
	// refused by the broker instead of talking past v2 unnoticed.
	v1Prefix = "ff/v1/mcp/"

	mcpPrefix   = ReservedPrefix + "mcp/"
	probePrefix = ReservedPrefix + "probe/"

	sharePrefix    = "$share/"
	maxTopicLength = 65535 // an MQTT UTF-8 string holds at most this many bytes
)

// ProbeTopic is the topic on which username (an identity's MQTT username)
// may publish and subscribe to measure a round trip between two of its own
// connections; level tells its probes apart. Both must pass contract.ValidLevel, or
// the Policy refuses the topic.
func ProbeTopic(username, level string) string {
	return probePrefix + username + "/" + level
}

// cutLevel splits s at its first '/': the first level, the rest, and whether
// there was a '/' at all (a topic "a/" has two levels, "a" and "").
func cutLevel(s string) (level, rest string, more bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// validTopicName reports whether t may be published to: a non-empty MQTT
// topic name without wildcards or NUL.
func validTopicName(t string) bool {
	if len(t) == 0 || len(t) > maxTopicLength {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '+', '#', 0:
			return false
		}
	}
	return true
}

// validTopicFilter reports whether f is a well-formed MQTT topic filter: not
// empty, no NUL, '+' only as a whole level, '#' only as the whole last level.
func validTopicFilter(f string) bool {
	if len(f) == 0 || len(f) > maxTopicLength {
		return false
	}
	for rest, more := f, true; more; {
		var level string
		level, rest, more = cutLevel(rest)
		if level == "#" {
			if more {
				return false
			}
			continue
		}
		if level == "+" {
			continue
		}
		for i := 0; i < len(level); i++ {
			switch level[i] {
			case '+', '#', 0:
				return false
			}
		}
	}
	return true
}

// topicMatches reports whether the topic name t matches the filter f by the
// MQTT rules ("a/#" also matches "a"). Both must be well formed. A '$' topic
// is never matched by a filter starting with a wildcard.
func topicMatches(f, t string) bool {
	if len(t) > 0 && t[0] == '$' && len(f) > 0 && (f[0] == '+' || f[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := cutLevel(f)
		if fl == "#" {
			return true
		}
		tl, trest, tmore := cutLevel(t)
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			// The topic has ended: only a trailing "#" still matches ("a/#" matches "a").
			return frest == "#"
		case !fmore:
			return false
		}
		f, t = frest, trest
	}
}

// filterCovers reports whether every topic the filter req matches is also
// matched by the filter rule. Both must be well formed.
func filterCovers(rule, req string) bool {
	for {
		rl, rrest, rmore := cutLevel(rule)
		if rl == "#" {
			return true
		}
		ql, qrest, qmore := cutLevel(req)
		switch {
		case ql == "#":
			// req also matches every deeper topic and its parent; only "#" covers that.
			return false
		case ql == "+":
			if rl != "+" {
				return false
			}
		default:
			if rl != "+" && rl != ql {
				return false
			}
		}
		switch {
		case !rmore && !qmore:
			return true
		case !qmore:
			return rrest == "#"
		case !rmore:
			return false
		}
		rule, req = rrest, qrest
	}
}

// reachesReserved reports whether the filter f (or topic name) could match a
// topic in a reserved tree: one under ff/v2/ (at least three levels, the
// first two ff and v2), or ff/v1/mcp and anything below it (ff/v1/mcp
// itself included, to be safe, as before v2). The bare topic ff/v2 is no
// part of either tree, so that operator rules such as "+/+" and "ff/+",
// valid before v2, stay valid.
func reachesReserved(f string) bool {
	level, rest, more := cutLevel(f)
	if level == "#" {
		return true
	}
	if level != "+" && level != "ff" || !more {
		return false
	}
	level, rest, more = cutLevel(rest)
	switch level {
	case "#":
		return true
	case "+", "v2":
		// Any third level is under ff/v2/ ("+" also stands for v2).
		return more
	case "v1":
		level, _, _ = cutLevel(rest)
		return more && (level == "#" || level == "+" || level == "mcp")
	}
	return false
}

// splitShare splits "$share/<group>/<filter>" into its group and filter. ok
// is false when f has no $share prefix or no filter after the group.
func splitShare(f string) (group, filter string, ok bool) {
	rest, found := strings.CutPrefix(f, sharePrefix)
	if !found {
		return "", "", false
	}
	group, filter, found = strings.Cut(rest, "/")
	if !found || filter == "" {
		return "", "", false
	}
	return group, filter, true
}

// ValidateRuleFilter reports why f cannot be the filter of an operator rule:
// it must be a well-formed MQTT filter in valid UTF-8, must not start with
// '$' (no $SYS, no $share) and must not be able to match any topic under
// ReservedPrefix or ff/v1/mcp/, which only the built-in rules govern. The
// error wraps ErrInvalidRule.
func ValidateRuleFilter(f string) error {
	switch {
	case !validTopicFilter(f):
		return fmt.Errorf("%w: %q is not a valid MQTT topic filter", ErrInvalidRule, f)
	case !utf8.ValidString(f):
		return fmt.Errorf("%w: filter is not valid UTF-8", ErrInvalidRule)
	case f[0] == '$':
		return fmt.Errorf("%w: %q: filters starting with '$' are not allowed", ErrInvalidRule, f)
	case reachesReserved(f):
		return fmt.Errorf("%w: %q could match topics under %s or %s, which only built-in rules govern", ErrInvalidRule, f, ReservedPrefix, v1Prefix)
	}
	return nil
}
