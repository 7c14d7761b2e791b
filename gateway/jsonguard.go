package gateway

import (
	"bytes"
	"encoding/json"
	"unicode"
	"unicode/utf8"

	textclip "github.com/toolbus/toolbus/internal/clip"
)

// Guards on a request body that the decoder cannot give.
//
// The decoder (segmentio) recurses once per nesting level, without a bound:
// a 4 MiB body of "[" needs a stack of about 2 GB, and Go ends the whole
// process ("goroutine stack exceeds limit") instead of failing the request.
// So nesting is bounded before anything is decoded.
//
// Member names are matched without regard to case by the decoder (as by
// encoding/json, and so by the Go agent SDK), last duplicate winning, while
// agents in other languages read JSON objects case-sensitively and some keep
// the first duplicate. Params are forwarded to the agents as they came, so a
// params object such as {"name":"delete_all","Name":"echo"} would be checked
// here as one tool and run by an agent as another. Names that repeat, also
// when only their case differs, are refused.

// maxJSONDepth bounds the nesting of arrays and objects in a request body,
// the envelope's own levels included. It is far above what MCP messages
// need and below what the usual JSON decoders of agents accept
// (serde_json's default is 128 levels, Python's about 1000).
const maxJSONDepth = 128

// tooDeep reports whether b nests arrays and objects deeper than limit. It
// does not validate b. Bodies with few brackets are answered by two
// vectorised counts; others by one pass that skips strings.
func tooDeep(b []byte, limit int) bool {
	if bytes.Count(b, []byte{'['})+bytes.Count(b, []byte{'{'}) <= limit {
		return false
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '[', '{':
			if depth++; depth > limit {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// stringEnd returns the index just past the string that starts with the
// quote at b[i], or len(b) if it does not end.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		q := j + k
		bs := 0 // backslashes right before the quote: odd means escaped
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// duplicateMember returns a member name of the JSON object b that repeats
// an earlier one, compared as encoding/json compares them (Unicode case
// folding), and true. Only the top level of b is looked at. b must be
// valid JSON (it was decoded already); anything else reports false.
func duplicateMember(b []byte) (string, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", false
	}
	i++
	var small [16][]byte
	names := small[:0]
	var folded map[string]struct{} // past len(small) names: by folded name
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] == '}' {
			return "", false
		}
		if b[i] == ',' {
			i++
			continue
		}
		if b[i] != '"' {
			return "", false
		}
		end := stringEnd(b, i)
		name := b[i+1 : max(end-1, i+1)]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			if json.Unmarshal(b[i:end], &s) != nil {
				return "", false
			}
			name = []byte(s)
		}
		if folded == nil {
			for _, n := range names {
				if bytes.EqualFold(n, name) {
					return string(name), true
				}
			}
			if len(names) < len(small) {
				names = append(names, name)
			} else {
				folded = make(map[string]struct{}, 2*len(small))
				for _, n := range names {
					folded[foldKey(n)] = struct{}{}
				}
			}
		}
		if folded != nil {
			k := foldKey(name)
			if _, dup := folded[k]; dup {
				return string(name), true
			}
			folded[k] = struct{}{}
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return "", false
		}
		i = skipValue(b, skipSpace(b, i+1))
	}
}

// foldKey maps a name to the smallest rune of each rune's case-folding
// orbit: two names have the same key exactly when bytes.EqualFold says they
// are equal.
func foldKey(name []byte) string {
	out := make([]byte, 0, len(name))
	for len(name) > 0 {
		r, n := utf8.DecodeRune(name)
		name = name[n:]
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		out = utf8.AppendRune(out, m)
	}
	return string(out)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n' {
			i++
		}
		return i
	}
}

// clip shortens a client-supplied name for an error message: the answer to
// a 1 MiB method or tool name need not carry it back. At most 128 bytes of
// it, and "…" when cut.
func clip(s string) string {
	return textclip.Marked(s, 128+len("…"))
}
