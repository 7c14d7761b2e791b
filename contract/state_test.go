package contract_test

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/contract"
)

func TestHeldState(t *testing.T) {
	state := contract.HoldState("bridge-1a2b", "opaque/with:any chars")
	if id, rest, ok := contract.HeldState(state); !ok || id != "bridge-1a2b" || rest != "opaque/with:any chars" {
		t.Errorf("HeldState(%q) = %q, %q, %v", state, id, rest, ok)
	}
	for _, tc := range []struct {
		name   string
		params string
		want   string
	}{
		{"held", `{"name":"t","requestState":"@inst-1/abc"}`, "inst-1"},
		{"held, escaped", `{"requestState":"\u0040inst-1/abc"}`, "inst-1"},
		{"no state", `{"name":"t"}`, ""},
		{"agent's own state", `{"requestState":"abc"}`, ""},
		{"no slash", `{"requestState":"@inst-1"}`, ""},
		{"wildcard instance", `{"requestState":"@+/abc"}`, ""},
		{"empty instance", `{"requestState":"@/abc"}`, ""},
		{"not a string", `{"requestState":{"a":"@x/y"}}`, ""},
		{"in another member", `{"arguments":{"requestState":"@x/y"}}`, ""},
		{"not an object", `["requestState"]`, ""},
		{"empty", ``, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := contract.HeldBy(json.RawMessage(tc.params)); got != tc.want {
				t.Errorf("HeldBy(%s) = %q, want %q", tc.params, got, tc.want)
			}
		})
	}
}

// Whatever the params, HeldBy names a valid topic level or nothing: the
// gateway puts it in a topic.
func FuzzHeldBy(f *testing.F) {
	for _, s := range []string{`{"requestState":"@a/b"}`, `{"requestState":"@#/b"}`, `{"requestState":"@a+b/"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		if id := contract.HeldBy(params); id != "" && contract.ValidateLevel(id) != nil {
			t.Fatalf("HeldBy(%q) = %q, not a valid level", params, id)
		}
	})
}
