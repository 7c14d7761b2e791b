package platformtools

import (
	"encoding/json"
	"testing"
)

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
