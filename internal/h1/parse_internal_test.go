package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

var testPaths = []string{"/mcp"}

// agreesWithNetHTTP checks the safety property of the fast path: a head
// that parseHead takes is one net/http reads the same way (method, target,
// Host, framing, every field).
func agreesWithNetHTTP(t *testing.T, raw []byte) {
	t.Helper()
	h, ok := parseHead(raw, testPaths)
	if !ok {
		return
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("parseHead took %q, net/http refuses it: %v", raw, err)
	}
	if req.Method != http.MethodPost || req.RequestURI != h.target || req.Host != h.host ||
		req.ContentLength != h.contentLength || req.Close != h.close || len(req.TransferEncoding) != 0 {
		t.Fatalf("%q: parseHead %+v, net/http %s %s host %q length %d close %v te %v",
			raw, h, req.Method, req.RequestURI, req.Host, req.ContentLength, req.Close, req.TransferEncoding)
	}
	if !reflect.DeepEqual(req.Header, h.header) {
		t.Fatalf("%q: header %v, net/http %v", raw, h.header, req.Header)
	}
}

func TestParseHead(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		ok   bool
	}{
		{"plain", "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n", true},
		{"fields", "POST /mcp HTTP/1.1\r\nHost: a:80\r\ncontent-type: application/json\r\nAUTHORIZATION:  Bearer x \r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\nConnection: Close\r\n\r\n", true},
		{"empty value", "POST /mcp HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n", true},
		{"keep-alive", "POST /mcp HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true},
		{"method and version only", "POST HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"other path", "POST /other HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"query", "POST /mcp?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"GET", "GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"HTTP/1.0", "POST /mcp HTTP/1.0\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"no length", "POST /mcp HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"two lengths", "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", false},
		{"signed length", "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", false},
		{"chunked", "POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"length and chunked", "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"expect", "POST /mcp HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", false},
		{"upgrade", "POST /mcp HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n", false},
		{"no host", "POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n", false},
		{"two hosts", "POST /mcp HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n", false},
		{"bad host", "POST /mcp HTTP/1.1\r\nHost: a b\r\nContent-Length: 0\r\n\r\n", false},
		{"bare LF", "POST /mcp HTTP/1.1\nHost: a\nContent-Length: 0\n\n", false},
		{"bare CR", "POST /mcp HTTP/1.1\r\nHost: a\rX: y\r\nContent-Length: 0\r\n\r\n", false},
		{"obs-fold", "POST /mcp HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\nContent-Length: 0\r\n\r\n", false},
		{"space before colon", "POST /mcp HTTP/1.1\r\nHost: a\r\nX : y\r\nContent-Length: 0\r\n\r\n", false},
		{"control in value", "POST /mcp HTTP/1.1\r\nHost: a\r\nX: y\x00\r\nContent-Length: 0\r\n\r\n", false},
		{"no colon", "POST /mcp HTTP/1.1\r\nHost: a\r\nXy\r\nContent-Length: 0\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ok := parseHead([]byte(tc.raw), testPaths)
			if ok != tc.ok {
				t.Fatalf("parseHead ok = %v, want %v", ok, tc.ok)
			}
			agreesWithNetHTTP(t, []byte(tc.raw))
		})
	}
}

// FuzzParseHead: whatever parseHead takes, net/http reads the same way.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: [::1]:8080\r\nMcp-Session-Id: abc\r\nContent-Length: 10\r\nConnection: close\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nhost: a\r\nX-\xff: \xfe\r\nContent-Length: 007\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		agreesWithNetHTTP(t, raw)
	})
}
