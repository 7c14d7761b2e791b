package h1

import (
	"bytes"
	"net/http"

	"golang.org/x/net/http/httpguts"
)

// head is a request head the fast path takes: POST to one of the served
// paths, HTTP/1.1, a single Content-Length and nothing that changes how the
// message is framed or answered.
type head struct {
	target        string
	header        http.Header
	host          string
	contentLength int64
	close         bool // Connection: close
}

// parseHead parses b, a request head through its blank line. ok is false for
// anything the fast path does not take, whether valid or not: net/http then
// reads the same bytes and answers them as it would have.
//
// The grammar it accepts is a strict subset of what net/http accepts, and
// frames a message exactly as net/http would (the body is Content-Length
// bytes), so that the two can never disagree on where a request ends.
func parseHead(b []byte, paths []string) (h head, ok bool) {
	line, rest, ok := cutLine(b)
	if !ok {
		return h, false
	}
	if h.target, ok = requestTarget(line, paths); !ok {
		return h, false
	}

	// One string holds every header value, and one slice every field's
	// first value (as net/http's textproto does): two allocations per
	// request, not two per field.
	block := string(rest)
	fields := max(bytes.Count(rest, []byte("\r\n"))-1, 0) // the blank line ends it
	h.header = make(http.Header, fields)
	firsts := make([]string, 0, fields)
	h.contentLength = -1
	hosts := 0
	for off := 0; ; {
		line, _, ok := cutLine(rest[off:])
		if !ok {
			return h, false
		}
		start := off
		off += len(line) + 2
		if len(line) == 0 {
			break // the blank line
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validName(line[:colon]) {
			return h, false // also obs-fold: a line that starts with a space
		}
		raw := line[colon+1:]
		lead := len(raw) - len(bytes.TrimLeft(raw, " \t"))
		v := bytes.TrimRight(raw[lead:], " \t")
		if !validValue(v) {
			return h, false
		}
		vstart := start + colon + 1 + lead
		value := block[vstart : vstart+len(v)]
		key := canonicalKey(line[:colon])
		switch key {
		case "Content-Length":
			if h.contentLength >= 0 {
				return h, false
			}
			n, ok := parseLength(v)
			if !ok {
				return h, false
			}
			h.contentLength = n
		case "Host":
			hosts++
			if hosts > 1 || !httpguts.ValidHostHeader(value) {
				return h, false
			}
			h.host = value
			continue // net/http keeps Host out of Header too
		case "Connection":
			switch {
			case asciiEqualFold(v, "close"):
				h.close = true
			case asciiEqualFold(v, "keep-alive"):
			default:
				return h, false
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer":
			return h, false
		}
		if vs, seen := h.header[key]; seen {
			h.header[key] = append(vs, value) // its cap is its length: a copy, not firsts
		} else {
			firsts = append(firsts, value)
			h.header[key] = firsts[len(firsts)-1 : len(firsts) : len(firsts)]
		}
	}
	if hosts != 1 || h.contentLength < 0 {
		return h, false
	}
	return h, true
}

// requestTarget returns the target of line, a request line without its
// CRLF, if it is "POST <one of paths> HTTP/1.1".
func requestTarget(line []byte, paths []string) (string, bool) {
	const method, proto = "POST ", " HTTP/1.1"
	if len(line) < len(method)+len(proto) || // "POST HTTP/1.1" has both, overlapping
		!bytes.HasPrefix(line, []byte(method)) || !bytes.HasSuffix(line, []byte(proto)) {
		return "", false
	}
	target := line[len(method) : len(line)-len(proto)]
	for _, p := range paths {
		if string(target) == p {
			return p, true
		}
	}
	return "", false
}

// cutLine cuts b at its first CRLF. A bare CR or LF before it, or no CRLF,
// is not ok.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, false
	}
	return line, b[i+1:], true
}

// validName reports whether b is a field name: one or more token
// characters (RFC 9110, 5.1).
func validName(b []byte) bool {
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return len(b) > 0
}

// validValue reports whether b is a field value as net/http takes it: no
// control characters but HTAB (RFC 9110, 5.5).
func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length of 1 to 15 decimal digits.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// commonKeys are the canonical names of the headers an MCP client sends,
// so that the usual request allocates no key.
var commonKeys = []string{
	"Accept", "Accept-Encoding", "Authorization", "Connection", "Content-Length",
	"Content-Type", "Host", "Last-Event-Id", "Mcp-Method", "Mcp-Name",
	"Mcp-Protocol-Version", "Mcp-Session-Id", "Origin", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Expect", "User-Agent", "X-Request-Id",
}

// canonicalKey is http.CanonicalHeaderKey of a valid field name, without
// an allocation for the common ones.
func canonicalKey(name []byte) string {
	for _, k := range commonKeys {
		if len(k) == len(name) && canonicalEqual(name, k) {
			return k
		}
	}
	return http.CanonicalHeaderKey(string(name))
}

// canonicalEqual reports whether name canonicalizes to k, a canonical key.
func canonicalEqual(name []byte, k string) bool {
	for i := range name {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		d := k[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
