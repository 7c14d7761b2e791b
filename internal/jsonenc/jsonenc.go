// Package jsonenc appends JSON strings byte for byte as encoding/json writes
// them, without its reflection and allocations: for the hot paths that
// build messages by hand (the Agent SDK's replies, platform tool results);
// and helps the hand-written scanners of those paths step over long
// strings (PlainWords).
package jsonenc

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s to dst as a JSON string, exactly as json.Marshal
// writes it when escapeHTML is true, and as a json.Encoder with
// SetEscapeHTML(false) does when it is false: invalid UTF-8 becomes
// \ufffd, and U+2028 and U+2029 are escaped (the output is valid
// JavaScript too).
func AppendString(dst []byte, s string, escapeHTML bool) []byte {
	dst = append(dst, '"')
	start := 0
	next := 0 // the next word to test: a word that failed goes byte by byte
	for i := 0; i < len(s); {
		if i >= next {
			if i+8 <= len(s) && !needsEscape(load64(s, i), escapeHTML) {
				i += 8
				continue
			}
			next = i + 8
		}
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (!escapeHTML || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // control characters, and <, > and & when escaping HTML
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
