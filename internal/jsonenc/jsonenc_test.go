package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
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

// longCases have runs long enough for whole words and one special
// sequence at every offset, on either side of a word's edge.
func longCases() []string {
	var out []string
	for n := range 20 {
		for _, sp := range []string{`"`, `\\`, "\n", "\x01", "\x7f", "<", ">", "&", "é", "\xff", "\u2028", "\xe2\x80"} {
			out = append(out, strings.Repeat("a", n)+sp+strings.Repeat("b", 19-n))
		}
	}
	return append(out, strings.Repeat("x", 1<<12), strings.Repeat("é", 100))
}

func TestAppendStringLongMatchesEncodingJSON(t *testing.T) {
	for _, s := range longCases() {
		check(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range append(seeds, longCases()...) {
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

func BenchmarkAppendStringMiB(b *testing.B) {
	s := strings.Repeat("x", 1<<20)
	buf := make([]byte, 0, len(s)+2)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = jsonenc.AppendString(buf[:0], s, true)
	}
}

// BenchmarkAppendStringDense is the word test's worst case: JSON text
// inside a string, a quote every few bytes, and non-ASCII text.
func BenchmarkAppendStringDense(b *testing.B) {
	for _, tc := range []struct{ name, s string }{
		{"json", strings.Repeat(`{"k":"v","n":[1,2]},`, 500)},
		{"cjk", strings.Repeat("日本語のテキスト", 400)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 4*len(tc.s))
			b.SetBytes(int64(len(tc.s)))
			for b.Loop() {
				buf = jsonenc.AppendString(buf[:0], tc.s, true)
			}
		})
	}
}
