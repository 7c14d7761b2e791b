package platformtools

import (
	"encoding/json"
	"testing"
)

// FuzzAppendString checks that appendString always produces a JSON string
// that decodes to what encoding/json's own encoding of s decodes to.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "\n\r\t\b\f\x00\x1f", "<>&", "\u2028\u2029", "\xff\xfe", "é日本語🙂", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		var dec string
		if err := json.Unmarshal(got, &dec); err != nil {
			t.Fatalf("appendString(%q) = %s: not a JSON string: %v", s, got, err)
		}
		ref, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		if dec != want {
			t.Fatalf("appendString(%q) decodes to %q, encoding/json to %q", s, dec, want)
		}
	})
}

func TestAcceptsAnyObject(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   bool
	}{
		{`{"type":"object"}`, true},
		{`{"type":"object","description":"x","properties":{}}`, true},
		{`{"type":"object","additionalProperties":true}`, true},
		{`{"type":"object","additionalProperties":false}`, false},
		{`{"type":"object","properties":{"a":{}}}`, false},
		{`{"type":"object","required":["a"]}`, false},
		{`{"type":"object","minProperties":1}`, false},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			c, err := compileSchema("t", "input", json.RawMessage(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			if c.anyObject != tc.want {
				t.Errorf("anyObject = %v, want %v", c.anyObject, tc.want)
			}
		})
	}
}
