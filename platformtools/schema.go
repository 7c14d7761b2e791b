package platformtools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	segjson "github.com/segmentio/encoding/json"
	"golang.org/x/text/message"
)

// schemaBase is the made-up location of tool schemas. Nothing is ever
// fetched from it: the loader refuses every URL, so a $ref can only point
// inside the schema itself (or at the embedded JSON Schema metaschemas).
const schemaBase = "https://toolbus.invalid/tools/"

// noLoader refuses to load anything: tool schemas must be self-contained,
// and compiling one must never read a file or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s: external references are not allowed", url)
}

// compiledSchema is a tool's compiled input or output schema.
type compiledSchema struct {
	sch *jsonschema.Schema
	// anyObject is true when the schema accepts every JSON object, so that
	// validation needs no decoding: only "is it an object".
	anyObject bool
	// flat, when not nil, accepts the common valid arguments without
	// decoding them (flatschema.go); the rest go to sch.
	flat *flatSchema
	raw  json.RawMessage // compacted
}

// compileSchema compiles one object schema of tool name (which is "input"
// or "output").
func compileSchema(name, which string, raw json.RawMessage) (*compiledSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s schema: %w", which, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok || obj["type"] != "object" {
		return nil, fmt.Errorf(`%s schema: top level must be an object schema with "type": "object"`, which)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("%s schema: %w", which, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	// Format is only an annotation in 2020-12 by default; a tool that
	// says "format": "date-time" means it, and its handler should be able
	// to rely on it.
	c.AssertFormat()
	loc := schemaBase + name + "/" + which + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%s schema: %w", which, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%s schema: %w", which, err)
	}
	cs := &compiledSchema{sch: sch, anyObject: acceptsAnyObject(obj), raw: compact.Bytes()}
	if !cs.anyObject {
		cs.flat = compileFlat(obj)
	}
	return cs, nil
}

// acceptsAnyObject reports whether an object schema has no keyword that
// could refuse an object: only "type": "object", annotations, and an empty
// "properties".
func acceptsAnyObject(obj map[string]any) bool {
	for k, v := range obj {
		switch k {
		case "type", "$schema", "$id", "$comment", "title", "description", "examples", "default":
		case "properties":
			if p, ok := v.(map[string]any); !ok || len(p) != 0 {
				return false
			}
		case "additionalProperties":
			if v != true {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// errNotObject is the validation error of arguments that are not an object.
var errNotObject = errors.New("arguments must be a JSON object")

// Bounds of a number in arguments. The validator parses numbers with
// math/big, where a literal like 1e999999 costs tens of milliseconds and
// hundreds of kilobytes; a few of those in an array would pin a core. Such
// numbers are far beyond float64 range anyway.
const (
	maxNumberLen      = 64
	maxNumberExponent = 400
)

// numberInRange reports whether n is within the bounds above.
func numberInRange(n json.Number) bool {
	if len(n) > maxNumberLen {
		return false
	}
	i := strings.IndexAny(string(n), "eE")
	if i < 0 {
		return true
	}
	e, err := strconv.Atoi(string(n[i+1:]))
	return err == nil && e >= -maxNumberExponent && e <= maxNumberExponent
}

// validate checks args (raw JSON) against s. It decodes args at most once.
// The error is meant for the model: it names the fields and the rules.
func (s *compiledSchema) validate(args []byte, p *message.Printer) error {
	if s.anyObject {
		if !isObject(args) || !json.Valid(args) {
			return errNotObject
		}
		return nil
	}
	if s.flat != nil && s.flat.accepts(args) {
		return nil
	}
	// segmentio's decoder: same results as encoding/json's with UseNumber,
	// a fraction of the cost on this per-call path.
	var v any
	rest, err := segjson.Parse(args, &v, segjson.UseNumber)
	if err != nil {
		return fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 { // JSON's whitespace, not Unicode's
		return errors.New("arguments are not valid JSON: data after the object")
	}
	if _, ok := v.(map[string]any); !ok {
		return errNotObject
	}
	if path, bad := badNumber(v); bad {
		return fmt.Errorf("argument %s: number out of range (at most %d characters and an exponent within ±%d)", fieldName(path), maxNumberLen, maxNumberExponent)
	}
	if err := s.sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return describeValidation(ve, p, "argument")
		}
		return err
	}
	return nil
}

// badNumber walks v and reports the first number out of range, with its
// path. The path is built only on the way out of a failure, so that the
// common case allocates nothing.
func badNumber(v any) (path []string, bad bool) {
	switch x := v.(type) {
	case json.Number:
		return nil, !numberInRange(x)
	case map[string]any:
		for k, e := range x {
			if p, bad := badNumber(e); bad {
				return append([]string{k}, p...), true
			}
		}
	case []any:
		for i, e := range x {
			if p, bad := badNumber(e); bad {
				return append([]string{strconv.Itoa(i)}, p...), true
			}
		}
	}
	return nil, false
}

func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// maxReported bounds how many schema violations one error lists.
const maxReported = 5

// describeValidation turns the validator's error tree into one sentence per
// leaf, naming the argument and the rule: e.g.
// `argument "count": got string, want integer (rule "type")`.
func describeValidation(ve *jsonschema.ValidationError, p *message.Printer, noun string) error {
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		msgs = append(msgs, describeLeaf(e, p, noun))
	}
	walk(ve)
	// The validator walks maps, so the order of leaves varies.
	sort.Strings(msgs)
	n := len(msgs)
	if n > maxReported {
		msgs = append(msgs[:maxReported], fmt.Sprintf("and %d more", n-maxReported))
	}
	return &validationError{Problems: msgs}
}

func describeLeaf(e *jsonschema.ValidationError, p *message.Printer, noun string) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		names := make([]string, len(k.Missing))
		for i, m := range k.Missing {
			names[i] = fieldName(append(e.InstanceLocation[:len(e.InstanceLocation):len(e.InstanceLocation)], m))
		}
		return fmt.Sprintf("missing required %s %s (rule %q)", noun, strings.Join(names, ", "), "required")
	case *kind.AdditionalProperties:
		names := make([]string, len(k.Properties))
		for i, m := range k.Properties {
			names[i] = fieldName(append(e.InstanceLocation[:len(e.InstanceLocation):len(e.InstanceLocation)], m))
		}
		return fmt.Sprintf("unknown %s %s (rule %q)", noun, strings.Join(names, ", "), "additionalProperties")
	}
	rule := strings.Join(e.ErrorKind.KeywordPath(), "/")
	if len(e.InstanceLocation) == 0 {
		return fmt.Sprintf("%ss: %s (rule %q)", noun, e.ErrorKind.LocalizedString(p), rule)
	}
	return fmt.Sprintf("%s %s: %s (rule %q)", noun, fieldName(e.InstanceLocation), e.ErrorKind.LocalizedString(p), rule)
}

// fieldName names an argument by its path, dotted: "text", "opts.limit",
// "items.2.name".
func fieldName(path []string) string { return strconv.Quote(strings.Join(path, ".")) }

// validationError is the error of arguments that do not match a tool's
// input schema. Registry.Call turns it into an isError result whose text is
// Error().
type validationError struct {
	// Problems has one sentence per violation, naming the argument and the
	// schema rule, e.g. `argument "count": got string, want integer (rule "type")`.
	Problems []string
}

func (e *validationError) Error() string {
	return "invalid arguments: " + strings.Join(e.Problems, "; ")
}

// validateOutput checks structured content (already JSON) against s.
func (s *compiledSchema) validateOutput(raw []byte, p *message.Printer) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	if err := s.sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return describeValidation(ve, p, "field")
		}
		return err
	}
	return nil
}
