package expertagent

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	segjson "github.com/segmentio/encoding/json"
)

// CallRequest.Bind runs on every tool call that takes arguments, and
// encoding/json's Decoder (the only way to refuse unknown fields) cost about
// a tenth of the agent's CPU per call. agentBindFast decodes with
// segmentio's decoder instead (already the gateway's), several times
// cheaper, where it is sure to fill v exactly as encoding/json would:
//
//   - the arguments are first checked by agentScan, which judges syntax,
//     nesting depth (segmentio has no limit) and trailing data as
//     encoding/json does;
//   - v's type must be built only from kinds whose decoding rules the two
//     share (agentBindable): no json.Unmarshaler or encoding.TextUnmarshaler
//     anywhere, no []byte (base64), no json.Number, no ",string" option, no
//     embedded structs, no interfaces but any;
//   - segmentio must succeed: anything it refuses goes to encoding/json,
//     whose errors (ErrInvalidArguments, naming the field) stay the ones
//     handlers see.
//
// FuzzAgentBind compares both on a type that uses every allowed kind.

// agentBindFast decodes args into v and reports true, or reports false
// (then v may hold a partial decoding, which encoding/json overwrites).
func agentBindFast(args []byte, v any) bool {
	if !agentBindable(reflect.TypeOf(v)) {
		return false
	}
	s := agentScan{b: args}
	if s.skip() != nil || s.end() != nil {
		return false
	}
	_, err := segjson.Parse(args, v, segjson.DisallowUnknownFields)
	return err == nil
}

// agentBindTypes caches agentBindable per type.
var agentBindTypes sync.Map // reflect.Type -> bool

// agentBindable reports whether t is a non-nil pointer type to a value
// agentBindFast may decode (see above).
func agentBindable(t reflect.Type) bool {
	if t == nil || t.Kind() != reflect.Pointer {
		return false
	}
	if ok, found := agentBindTypes.Load(t); found {
		return ok.(bool)
	}
	ok := agentPlainType(t.Elem(), map[reflect.Type]bool{})
	agentBindTypes.Store(t, ok)
	return ok
}

var (
	agentJSONUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	agentTextUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	agentJSONNumber      = reflect.TypeFor[json.Number]()
)

// agentPlainType reports whether values of t decode the same way with both
// decoders. seen breaks cycles of recursive types (assumed plain while
// their check is under way).
func agentPlainType(t reflect.Type, seen map[reflect.Type]bool) bool {
	if ok, found := seen[t]; found {
		return ok
	}
	seen[t] = true
	ok := agentPlainKind(t, seen)
	seen[t] = ok
	return ok
}

func agentPlainKind(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == agentJSONNumber || t.Implements(agentJSONUnmarshaler) || t.Implements(agentTextUnmarshaler) ||
		reflect.PointerTo(t).Implements(agentJSONUnmarshaler) || reflect.PointerTo(t).Implements(agentTextUnmarshaler) {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Interface:
		return t.NumMethod() == 0
	case reflect.Pointer, reflect.Array:
		return agentPlainType(t.Elem(), seen)
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Uint8 && agentPlainType(t.Elem(), seen) // []byte is base64
	case reflect.Map:
		return t.Key().Kind() == reflect.String && agentPlainType(t.Key(), seen) && agentPlainType(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				return false
			}
			if !f.IsExported() {
				continue // both decoders ignore it
			}
			if tag := f.Tag.Get("json"); tag == "-" {
				continue
			} else if _, opts, _ := strings.Cut(tag, ","); strings.Contains(","+opts+",", ",string,") {
				return false
			}
			if !agentPlainType(f.Type, seen) {
				return false
			}
		}
		return true
	}
	return false // complex numbers, channels, functions: encoding/json refuses them its own way
}
