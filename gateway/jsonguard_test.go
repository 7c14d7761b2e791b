package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTooDeep(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name string
		body string
		deep bool
	}{
		{"flat", `{"a":1}`, false},
		{"at the limit", nest(maxJSONDepth), false},
		{"one over", nest(maxJSONDepth + 1), true},
		{"objects", strings.Repeat(`{"a":`, maxJSONDepth+1), true},
		{"open only", strings.Repeat("[", 1<<20), true},
		{"many siblings", "[" + strings.Repeat("[],", 10000) + "[]]", false},
		{"brackets in strings", `{"a":"` + strings.Repeat("[{", 1000) + `"}`, false},
		{"escaped quote keeps the string open", `{"a":"\"` + strings.Repeat("[", 1000) + `"}`, false},
		{"escaped backslash ends the string", `["\\",` + nest(maxJSONDepth) + `]`, true},
		{"unterminated string", `["` + strings.Repeat("[", 1000), false},
		{"closers first", strings.Repeat("]", 1000) + nest(10), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tooDeep([]byte(tc.body), maxJSONDepth); got != tc.deep {
				t.Fatalf("tooDeep = %v, want %v", got, tc.deep)
			}
		})
	}
}

func TestDuplicateMember(t *testing.T) {
	many := func(n int, last string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			b.WriteString(`"k` + strings.Repeat("x", i) + `":1,`)
		}
		b.WriteString(last + "}")
		return b.String()
	}
	for _, tc := range []struct {
		name, obj string
		dup       bool
		member    string // the repeated name reported
	}{
		{"none", `{"name":"a","arguments":{"name":"b","name":"c"}}`, false, ""},
		{"exact", `{"name":"a","name":"b"}`, true, "name"},
		{"case", `{"name":"a","Name":"b"}`, true, "Name"},
		{"escaped", `{"name":"a","\u006eame":"b"}`, true, "name"},
		{"escaped upper", `{"na\u004De":"a","name":"b"}`, true, "name"},
		{"kelvin sign folds to k", `{"kind":1,"` + "\u212a" + `ind":2}`, true, "\u212aind"},
		{"long s folds to s", `{"s":1,"` + "\u017f" + `":2}`, true, "\u017f"},
		{"values of every kind skipped", `{"a":"x\"}","b":[1,{"a":2}],"c":{"a":[]},"d":-1.5e3,"e":true,"f":null,"A":0}`, true, "A"},
		{"whitespace", " {\n\t\"a\" : 1 ,\r\n \"a\"\t: 2 } ", true, "a"},
		{"past the small table", many(40, `"KXXXXX":2`), true, "KXXXXX"},
		{"past the small table, none", many(40, `"z":2`), false, ""},
		{"empty names", `{"":1,"":2}`, true, ""},
		{"empty object", `{}`, false, ""},
		{"not an object", `["a","a"]`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			member, dup := duplicateMember([]byte(tc.obj))
			if dup != tc.dup || member != tc.member {
				t.Fatalf("got %q %v, want %q %v", member, dup, tc.member, tc.dup)
			}
		})
	}
}

// refDuplicate is duplicateMember written with encoding/json's tokenizer.
func refDuplicate(b []byte) (bool, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return false, false
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false, false
		}
		name := tok.(string)
		for _, n := range names {
			if strings.EqualFold(n, name) {
				return true, true
			}
		}
		names = append(names, name)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false, false
		}
	}
	return false, true
}

// refDepth is the nesting depth of valid JSON, by encoding/json's tokenizer.
func refDepth(b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return deepest
		}
		if err != nil {
			return -1
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

// FuzzJSONGuards checks the guards against encoding/json on valid JSON:
// the same duplicates (compared as encoding/json compares names), the same
// depth verdict, and never a panic on anything.
func FuzzJSONGuards(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","Name":"b"}`, `{"a":{"a":1},"b":"\"","c":[1,2,{"c":3}]}`, `{"\u006eame":1,"name":2}`,
		`{"` + "\u212a" + `":1,"k":2}`, `[[[[]]]]`, `{"a":"[[[["}`, `{"a":1e5,"b":-0,"c":true}`, `{`, `"\\"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, dup := duplicateMember(b)
		deep := tooDeep(b, 8)
		if !json.Valid(b) || !utf8.Valid(b) { // the gateway refuses both before these run
			return
		}
		if want, ok := refDuplicate(b); ok && dup != want {
			t.Fatalf("duplicateMember(%q) = %v, encoding/json says %v", b, dup, want)
		}
		if d := refDepth(b); d >= 0 && deep != (d > 8) {
			t.Fatalf("tooDeep(%q, 8) = %v, depth is %d", b, deep, d)
		}
	})
}

func TestClip(t *testing.T) {
	if s := clip("short"); s != "short" {
		t.Fatal(s)
	}
	long := strings.Repeat("é", 100) // 200 bytes: the cut falls inside a rune
	got := clip(long)
	if !strings.HasSuffix(got, "…") || len(got) > 128+len("…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Fatalf("clip = %q", got)
	}
	if !json.Valid([]byte(`"` + got + `"`)) {
		t.Fatal("clip cut a rune")
	}
}

// BenchmarkRequestGuards is what the guards add to a typical tools/call.
func BenchmarkRequestGuards(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world","n":[1,2,3]},"_meta":{"progressToken":"p-17"}}}`)
	params := body[bytes.Index(body, []byte(`"params":`))+9 : len(body)-1]
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if tooDeep(body, maxJSONDepth) {
			b.Fatal("deep")
		}
		if _, dup := duplicateMember(body); dup {
			b.Fatal("dup")
		}
		if _, dup := duplicateMember(params); dup {
			b.Fatal("dup")
		}
	}
}
