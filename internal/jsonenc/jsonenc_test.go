package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/internal/jsonenc"
)

var seeds = []string{"", "plain", "quote\" back\\slash", "\n\r\t\b\f\x00\x1f\x7f", "<a href='x'>&amp;</a>",
	"\u2028\u2029", "\xff\xfe", "é日本語🙂", "a\xc3", "\xed\xa0\x80", "tab\tand\u00a0nbsp"}

// reference is what encoding/json writes for s.
func reference(t *testing.T, s string, escapeHTML bool) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func check(t *testing.T, s string) {
	for _, html := range []bool{true, false} {
		want := reference(t, s, html)
		got := jsonenc.AppendString([]byte("x"), s, html)
		if got[0] != 'x' || !bytes.Equal(got[1:], want) {
			t.Fatalf("AppendString(%q, escapeHTML %t) = %s, encoding/json writes %s", s, html, got[1:], want)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		check(t, s)
	}
	for b := range 256 { // every single byte
		check(t, string([]byte{byte(b)}))
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(check)
}

func ExampleAppendString() {
	fmt.Println(string(jsonenc.AppendString(nil, "a<b>\n", true)))
	fmt.Println(string(jsonenc.AppendString(nil, "a<b>\n", false)))
	// Output:
	// "a\u003cb\u003e\n"
	// "a<b>\n"
}
