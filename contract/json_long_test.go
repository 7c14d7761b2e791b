package contract

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jsonrpc"
)

// longStringCases are JSON string literals (quotes included), some not
// valid, with plain runs long enough for whole words and one special
// sequence at every offset: what jsonenc.PlainWords hands back to the byte
// loops, on either side of a word's edge.
func longStringCases() []string {
	specials := []string{`\"`, `\\`, `\n`, `\u00e9`, `\u12`, `\x`, "\x01", "\x1f", "é", "\xff", `"`}
	var out []string
	for n := range 20 {
		for _, sp := range specials {
			out = append(out, `"`+strings.Repeat("a", n)+sp+strings.Repeat("b", 19-n)+`"`)
		}
	}
	return append(out, `"`+strings.Repeat("x", 1<<16)+`"`, `"`+strings.Repeat("y", 23))
}

// longStringPayloads puts each long string where the scanners meet it: in a
// reply's result (the requester) and in a request's arguments and
// correlation ID (the agent).
func longStringPayloads() (replies, requests []string) {
	for _, s := range longStringCases() {
		replies = append(replies, `{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","result":{"content":[{"type":"text","text":`+s+`}]}}}`)
		requests = append(requests,
			`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":`+s+`}}}}`,
			`{"v":2,"correlationId":`+s+`,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`)
	}
	return replies, requests
}

func TestLongStringsDecodeAsEncodingJSON(t *testing.T) {
	replies, requests := longStringPayloads()
	for _, p := range replies {
		checkFastDecode(t, []byte(p))
	}
	for _, p := range requests {
		checkDecode(t, []byte(p))
	}
}

// BenchmarkDecodeMiB decodes a reply and a request that each carry 1 MiB of
// text, as the requester and the agent do for every such call.
func BenchmarkDecodeMiB(b *testing.B) {
	text := `"` + strings.Repeat("x", 1<<20) + `"`
	reply := []byte(`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","result":{"content":[{"type":"text","text":` + text + `}]}}}`)
	request := []byte(`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"echo","arguments":{"text":` + text + `}}}}`)
	b.Run("reply", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		for b.Loop() {
			var env Envelope
			var m jsonrpc.Message
			if !decodeEnvelopeFast(reply, &env, &m) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("request", func(b *testing.B) {
		b.SetBytes(int64(len(request)))
		for b.Loop() {
			var env Envelope
			var m jsonrpc.Message
			if err := Decode(request, &env, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
