package platformtools

import (
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"
)

// flatSchema is the shape of most tool input schemas: an object whose
// properties each have at most one primitive type, some of them required,
// others perhaps refused. Arguments that fit are accepted after one scan,
// without decoding them into maps for the full validator, which costs
// more than the rest of a platform call. The scan only ever says
// yes: whatever it finds wrong, or is not sure of, goes to the full
// validator, which gives the answer and its error message. So it accepts
// nothing the full validator would refuse, and every refusal reads the same.
type flatSchema struct {
	props    map[string]flatProp
	required map[string]int // name -> bit in the scan's mask
	closed   bool           // "additionalProperties": false
}

type flatProp struct {
	typ      flatType
	required int // bit in the scan's mask, -1 if not required
}

type flatType uint8

const (
	flatAny flatType = iota // no "type": any value
	flatString
	flatNumber
	flatInteger
	flatBoolean
	flatNull
)

var flatTypes = map[string]flatType{
	"string": flatString, "number": flatNumber, "integer": flatInteger, "boolean": flatBoolean, "null": flatNull,
}

// annotations are keywords that never refuse a value.
var annotations = map[string]bool{
	"$schema": true, "$comment": true, "title": true, "description": true, "examples": true,
	"default": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// compileFlat returns the flat form of an object schema (its decoded JSON),
// or nil when the schema has any keyword beyond the flat shape.
func compileFlat(obj map[string]any) *flatSchema {
	f := &flatSchema{props: map[string]flatProp{}, required: map[string]int{}}
	for k, v := range obj {
		switch {
		case annotations[k]:
		case k == "type":
			if v != "object" {
				return nil
			}
		case k == "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			f.closed = !b
		case k == "required":
			names, ok := v.([]any)
			if !ok || len(names) > 64 {
				return nil
			}
			for _, n := range names {
				s, ok := n.(string)
				if !ok {
					return nil
				}
				if _, dup := f.required[s]; !dup {
					f.required[s] = len(f.required)
				}
			}
		case k == "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for name, ps := range props {
				p, ok := flatPropOf(ps)
				if !ok {
					return nil
				}
				f.props[name] = p
			}
		default:
			return nil
		}
	}
	for name, p := range f.props {
		p.required = -1
		if bit, ok := f.required[name]; ok {
			p.required = bit
		}
		f.props[name] = p
	}
	return f
}

func flatPropOf(ps any) (flatProp, bool) {
	if b, ok := ps.(bool); ok && b { // "name": true accepts anything
		return flatProp{typ: flatAny}, true
	}
	m, ok := ps.(map[string]any)
	if !ok {
		return flatProp{}, false
	}
	p := flatProp{typ: flatAny}
	for k, v := range m {
		switch {
		case annotations[k]:
		case k == "type":
			s, ok := v.(string)
			if !ok {
				return flatProp{}, false
			}
			if p.typ, ok = flatTypes[s]; !ok {
				return flatProp{}, false
			}
		default:
			return flatProp{}, false
		}
	}
	return p, true
}

// accepts reports whether args surely satisfy the schema; false means "ask
// the full validator", not "invalid".
func (f *flatSchema) accepts(args []byte) bool {
	if !segjson.Valid(args) {
		return false
	}
	i := skipSpace(args, 0)
	if i >= len(args) || args[i] != '{' {
		return false
	}
	var seen uint64
	i = skipSpace(args, i+1)
	if i < len(args) && args[i] == '}' {
		return f.allRequired(seen)
	}
	for i < len(args) {
		// A member: "name" : value. The JSON is valid, so the structure
		// is known; only the name and the value's kind are read.
		end, plain := stringEnd(args, i)
		if !plain {
			return false // an escaped name: compared decoded by the full validator
		}
		name := args[i+1 : end-1]
		if !utf8.Valid(name) {
			return false // decoded, its bad bytes become U+FFFD, which may name a property
		}
		i = skipSpace(args, end)
		i = skipSpace(args, i+1) // the ':'
		p, known := f.props[string(name)]
		if !known && f.closed {
			return false
		}
		next, ok := f.valueFits(args, i, p.typ)
		if !ok {
			return false
		}
		if known && p.required >= 0 {
			seen |= 1 << p.required
		} else if bit, ok := f.required[string(name)]; ok {
			seen |= 1 << bit // required, yet not among the properties
		}
		i = skipSpace(args, next)
		if args[i] == '}' {
			return f.allRequired(seen)
		}
		i = skipSpace(args, i+1) // the ','
	}
	return false
}

func (f *flatSchema) allRequired(seen uint64) bool {
	return seen == 1<<len(f.required)-1
}

// valueFits skips the value at args[i] and reports whether it is surely of
// type t, and every number in it within the validator's bounds.
func (f *flatSchema) valueFits(args []byte, i int, t flatType) (next int, ok bool) {
	switch c := args[i]; {
	case c == '"':
		end, _ := stringEnd(args, i)
		return end, t == flatAny || t == flatString
	case c == 't':
		return i + 4, t == flatAny || t == flatBoolean
	case c == 'f':
		return i + 5, t == flatAny || t == flatBoolean
	case c == 'n':
		return i + 4, t == flatAny || t == flatNull
	case c == '-' || '0' <= c && c <= '9':
		end, fraction, ok := numberEnd(args, i)
		return end, ok && (t == flatAny || t == flatNumber || t == flatInteger && !fraction)
	default: // an object or an array: only "any" takes one
		if t != flatAny {
			return 0, false
		}
		return nestedEnd(args, i)
	}
}

// nestedEnd skips the object or array at args[i]; ok is false when a
// number inside is out of the validator's bounds.
func nestedEnd(args []byte, i int) (next int, ok bool) {
	depth := 0
	for i < len(args) {
		switch c := args[i]; {
		case c == '{' || c == '[':
			depth++
			i++
		case c == '}' || c == ']':
			depth--
			i++
			if depth == 0 {
				return i, true
			}
		case c == '"':
			i, _ = stringEnd(args, i)
		case c == '-' || '0' <= c && c <= '9':
			var fine bool
			if i, _, fine = numberEnd(args, i); !fine {
				return 0, false
			}
		default:
			i++
		}
	}
	return 0, false
}

// stringEnd returns the index after the string starting at args[i] (a
// quote), and whether it holds no escape.
func stringEnd(args []byte, i int) (end int, plain bool) {
	plain = true
	for i++; i < len(args); i++ {
		switch args[i] {
		case '\\':
			plain = false
			i++
		case '"':
			return i + 1, plain
		}
	}
	return len(args), false
}

// numberEnd returns the index after the number starting at args[i], whether
// it has a fraction or an exponent, and whether it is surely within the
// validator's bounds (numberInRange): short, and without an exponent (those
// go to the full validator).
func numberEnd(args []byte, i int) (end int, fraction, ok bool) {
	start := i
	ok = true
	for ; i < len(args); i++ {
		switch c := args[i]; {
		case '0' <= c && c <= '9', c == '-', c == '+':
		case c == '.':
			fraction = true
		case c == 'e' || c == 'E':
			fraction, ok = true, false
		default:
			return i, fraction, ok && i-start <= maxNumberLen
		}
	}
	return i, fraction, ok && i-start <= maxNumberLen
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
