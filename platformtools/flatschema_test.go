package platformtools

import (
	"encoding/json"
	"testing"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

const flatTestSchema = `{"type":"object","description":"d","properties":{
	"text":{"type":"string","description":"t"},"count":{"type":"integer"},"ratio":{"type":"number"},
	"on":{"type":"boolean"},"none":{"type":"null"},"anything":{},"yes":true},
	"required":["text","count"]}`

// compileBoth returns the schema as compiled (with its flat form) and a copy
// that always takes the full validator.
func compileBoth(t testing.TB, schema string) (fast, full *compiledSchema) {
	t.Helper()
	cs, err := compileSchema("t", "input", json.RawMessage(schema))
	if err != nil {
		t.Fatal(err)
	}
	slow := *cs
	slow.flat = nil
	return cs, &slow
}

func TestCompileFlat(t *testing.T) {
	cases := []struct {
		schema string
		flat   bool
	}{
		{flatTestSchema, true},
		{`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, true},
		{`{"type":"object","required":["a"]}`, true},
		{`{"type":"object","properties":{"a":{"type":"string","minLength":1}}}`, false},
		{`{"type":"object","properties":{"a":{"type":["string","null"]}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"object"}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"string","format":"date-time"}}}`, false},
		{`{"type":"object","properties":{"a":{"enum":["x"]}}}`, false},
		{`{"type":"object","properties":{"a":false}}`, false},
		{`{"type":"object","additionalProperties":{"type":"string"}}`, false},
		{`{"type":"object","minProperties":1}`, false},
		{`{"type":"object","$defs":{"x":{}},"properties":{"a":{"$ref":"#/$defs/x"}}}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.schema, func(t *testing.T) {
			cs, _ := compileBoth(t, tc.schema)
			if got := cs.flat != nil; got != tc.flat {
				t.Errorf("flat = %v, want %v", got, tc.flat)
			}
		})
	}
}

// TestFlatAccepts: the scan accepts what fits the schema and hands
// everything else to the full validator, which decides. Where the scan
// says yes, the full validator must say yes too.
func TestFlatAccepts(t *testing.T) {
	open, openFull := compileBoth(t, flatTestSchema)
	closed, closedFull := compileBoth(t, `{"type":"object","properties":{"a":{"type":"string"},"n":{"type":"number"}},"required":["a"],"additionalProperties":false}`)
	odd, oddFull := compileBoth(t, `{"type":"object","properties":{"\ufffd":{"type":"string"}}}`)
	p := message.NewPrinter(language.English)
	cases := []struct {
		name    string
		s, full *compiledSchema
		args    string
		fast    bool // the scan accepts
		valid   bool // the full validator accepts
	}{
		{"required only", open, openFull, `{"text":"hi","count":3}`, true, true},
		{"spaces", open, openFull, " { \"text\" : \"h\\\"i\" ,\n\"count\" : -3 } ", true, true},
		{"every type", open, openFull, `{"text":"","count":0,"ratio":-1.5,"on":false,"none":null,"anything":{"x":[1,{"y":"}"}]},"yes":[]}`, true, true},
		{"extra member", open, openFull, `{"text":"a","count":1,"other":{"deep":[true,null,"]"]}}`, true, true},
		{"missing required", open, openFull, `{"text":"a"}`, false, false},
		{"wrong type", open, openFull, `{"text":1,"count":1}`, false, false},
		{"integer with fraction", open, openFull, `{"text":"a","count":1.5}`, false, false},
		{"integral fraction", open, openFull, `{"text":"a","count":1.0}`, false, true},
		{"exponent", open, openFull, `{"text":"a","count":1,"ratio":1e3}`, false, true},
		{"huge exponent deep", open, openFull, `{"text":"a","count":1,"other":[1e999999]}`, false, false},
		{"long number", open, openFull, `{"text":"a","count":1,"ratio":1.00000000000000000000000000000000000000000000000000000000000000001}`, false, false},
		{"escaped name", open, openFull, `{"te\u0078t":"a","count":1}`, false, true},
		{"invalid UTF-8 in a name", open, openFull, "{\"text\":\"a\",\"count\":1,\"\xff\":{}}", false, true},
		{"invalid UTF-8 in a value", open, openFull, "{\"text\":\"\xff\",\"count\":1}", true, true},
		{"duplicate, last wrong", open, openFull, `{"text":"a","count":1,"text":2}`, false, false},
		{"not an object", open, openFull, `["text"]`, false, false},
		{"invalid JSON", open, openFull, `{"text":"a","count":1`, false, false},
		{"trailing data", open, openFull, `{"text":"a","count":1} {}`, false, false},
		{"invalid UTF-8 decodes to a property", odd, oddFull, "{\"\xff\":5}", false, false},
		{"closed ok", closed, closedFull, `{"a":"x","n":2}`, true, true},
		{"closed extra", closed, closedFull, `{"a":"x","b":2}`, false, false},
		{"closed empty", closed, closedFull, `{}`, false, false},
		{"closed required", closed, closedFull, `{"a":"x"}`, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.flat.accepts([]byte(tc.args)); got != tc.fast {
				t.Errorf("scan accepts = %v, want %v", got, tc.fast)
			}
			fullErr := tc.full.validate([]byte(tc.args), p)
			if (fullErr == nil) != tc.valid {
				t.Errorf("full validator: %v, want valid = %v", fullErr, tc.valid)
			}
			// The schema with its flat form gives the full validator's
			// answer, and the same message.
			err := tc.s.validate([]byte(tc.args), p)
			if (err == nil) != (fullErr == nil) || err != nil && err.Error() != fullErr.Error() {
				t.Errorf("validate = %v, full validator = %v", err, fullErr)
			}
		})
	}
}

// FuzzFlatSchema: whatever the arguments, the scan never accepts what the
// full validator refuses.
func FuzzFlatSchema(f *testing.F) {
	for _, s := range []string{
		`{"text":"hi","count":3}`, `{"text":"a","count":1.0}`, `{"text":"a","count":1,"other":[1e999999]}`,
		`{"a":"x","n":2}`, `{"a":"x","b":2}`, `{"text":"\u00e9\\","count":-0}`, `{"text":"a","count":1,"text":2}`,
		`{"anything":{"a":[{"b":"}]"}]},"text":"","count":0}`, "{\"text\":\"\xff\",\"count\":1}", `{}`, ` `,
		"{\"\xff\":5}", "{\"a\xfe\":1.5}",
	} {
		f.Add([]byte(s))
	}
	open, openFull := compileBoth(f, flatTestSchema)
	closed, closedFull := compileBoth(f, `{"type":"object","properties":{"a":{"type":"string"},"n":{"type":"number"}},"required":["a"],"additionalProperties":false}`)
	// A name that invalid UTF-8 in the arguments decodes to.
	odd, oddFull := compileBoth(f, `{"type":"object","properties":{"\ufffd":{"type":"string"},"a\ufffd":{"type":"integer"}}}`)
	p := message.NewPrinter(language.English)
	f.Fuzz(func(t *testing.T, args []byte) {
		for _, s := range []struct{ fast, full *compiledSchema }{{open, openFull}, {closed, closedFull}, {odd, oddFull}} {
			if s.fast.flat.accepts(args) {
				if err := s.full.validate(args, p); err != nil {
					t.Fatalf("scan accepts %q, the full validator refuses it: %v", args, err)
				}
			}
		}
	})
}
