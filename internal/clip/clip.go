// Package clip cuts text that a client, an agent or an upstream chose to a
// bound before it reaches a log line, an audit record, an error message or
// memory kept for long: such text may be megabytes, and each copy of it
// would be kept whole.
package clip

import (
	"strconv"
	"unicode/utf8"
)

// String returns s if it fits in n bytes, else its first n bytes or fewer,
// cut on a rune boundary (a cut never splits a UTF-8 sequence; invalid
// bytes before the cut stay as they are).
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Marked is String with "…" after a cut, the whole within n bytes (n at
// least 3), so that a reader sees the text was longer.
func Marked(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return String(s, n-len("…")) + "…"
}

// Counted is String with "…(N more bytes)" after a cut: for log lines,
// where how much was left out helps.
func Counted(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := String(s, n)
	return head + "…(" + strconv.Itoa(len(s)-len(head)) + " more bytes)"
}
