package bridge

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// chunkedReader hands out its data a few bytes at a time, so that messages
// and delimiters straddle reads.
type chunkedReader struct {
	data []byte
	n    int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.n, len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func (r *chunkedReader) Close() error { return nil }

func TestFrameReader(t *testing.T) {
	big := strings.Repeat("x", 300)
	const max = 100
	tests := []struct {
		name    string
		mode    frameMode
		in      string
		want    string
		wantIDs []string // ids reported over max ("" = none)
	}{
		{name: "lines within max pass as they are", mode: frameLines,
			in:   "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n",
			want: "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n"},
		{name: "a last line without newline", mode: frameLines, in: `{"id":1}`, want: `{"id":1}`},
		{name: "a long answer becomes an error, id first", mode: frameLines,
			in:      "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"" + big + "\"}}\n{\"id\":8}\n",
			want:    "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32603,\"message\":\"the upstream MCP server's answer is 346 bytes, more than the bridge reads (100, --upstream-max-message); ask for less\"}}\n{\"id\":8}\n",
			wantIDs: []string{"7"}},
		{name: "id last, a string, after nested ids and escaped quotes", mode: frameLines,
			in:      "{\"result\":{\"id\":\"inner\",\"text\":\"\\\"id\\\":9 " + big + "\"},\"jsonrpc\":\"2.0\",\"id\":\"a-1\"}\n",
			wantIDs: []string{`"a-1"`}},
		{name: "a long notification is dropped", mode: frameLines,
			in:      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"" + big + "\"}}\n{\"id\":8}\n",
			want:    "{\"id\":8}\n",
			wantIDs: []string{""}},
		{name: "a long request of the upstream is dropped", mode: frameLines,
			in:      "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sampling/createMessage\",\"params\":{\"x\":\"" + big + "\"}}\n",
			want:    "",
			wantIDs: []string{""}},
		{name: "a long batch is dropped", mode: frameLines,
			in: "[{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"x\":\"" + big + "\"}}]\n", want: "", wantIDs: []string{""}},
		{name: "events within max pass", mode: frameEvents,
			in:   "event: message\r\ndata: {\"id\":1}\r\n\r\n: ping\n\nid: 5\ndata: {\"id\":2}\n\n",
			want: "event: message\r\ndata: {\"id\":1}\r\n\r\n: ping\n\nid: 5\ndata: {\"id\":2}\n\n"},
		{name: "a long event becomes an error event", mode: frameEvents,
			in:      "event: message\nid: {9}\n: {\"id\":4}\ndata: {\"jsonrpc\":\"2.0\",\"result\":{\"t\":\"" + big + "\"},\ndata: \"id\":5}\n\ndata: {\"id\":6}\n\n",
			wantIDs: []string{"5"}},
		{name: "a body within max passes", mode: frameBody, in: "{\n  \"id\": 1,\n  \"result\": {}\n}\n", want: "{\n  \"id\": 1,\n  \"result\": {}\n}\n"},
		{name: "a long body becomes an error", mode: frameBody,
			in: "{\n  \"jsonrpc\": \"2.0\",\n  \"result\": {\"t\": \"" + big + "\"},\n  \"id\": 12\n}\n", wantIDs: []string{"12"}},
		{name: "a long body that answers nothing becomes a log notification", mode: frameBody,
			in: "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"t\":\"" + big + "\"}}", wantIDs: []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []string
			f := newFrameReader(&chunkedReader{data: []byte(tt.in), n: 7}, tt.mode, max, func(_ int, id json.RawMessage) {
				ids = append(ids, string(id))
			})
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(ids, ",") != strings.Join(tt.wantIDs, ",") {
				t.Errorf("ids over max = %q, want %q", ids, tt.wantIDs)
			}
			if tt.want != "" || tt.wantIDs == nil {
				if string(got) != tt.want {
					t.Errorf("read\n%s\nwant\n%s", got, tt.want)
				}
			}
			checkMessages(t, tt.mode, got, tt.wantIDs)
		})
	}
}

// checkMessages checks that every message read is small, and that each
// id reported over max got an error response.
func checkMessages(t *testing.T, mode frameMode, got []byte, ids []string) {
	t.Helper()
	var msgs [][]byte
	switch mode {
	case frameLines:
		msgs = bytes.Split(got, []byte("\n"))
	case frameEvents:
		for _, l := range bytes.Split(got, []byte("\n")) {
			if d, ok := bytes.CutPrefix(l, []byte("data: ")); ok {
				msgs = append(msgs, d)
			}
		}
	case frameBody:
		msgs = [][]byte{got}
	}
	errs := map[string]bool{}
	for _, m := range msgs {
		m = bytes.TrimSpace(m)
		if len(m) == 0 {
			continue
		}
		var v struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(m, &v); err != nil {
			continue // a data line continued on the next (the events test's second event)
		}
		if v.Error != nil && v.Error.Code == -32603 && strings.Contains(v.Error.Message, "--upstream-max-message") {
			errs[string(v.ID)] = true
		}
		if v.Method == "notifications/message" && mode != frameBody {
			t.Errorf("a log notification in mode %d: %s", mode, m)
		}
	}
	for _, id := range ids {
		if id != "" && !errs[id] {
			t.Errorf("no error response for id %s in %s", id, got)
		}
	}
}

// endless is a reader of one line of n bytes, generated as it is read.
type endless struct{ n int }

func (r *endless) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	if k == r.n {
		p[k-1] = '\n'
	}
	r.n -= k
	return k, nil
}

func (r *endless) Close() error { return nil }

// A long message is not kept: what the reader holds stays within its
// bound however long the message is.
func TestFrameReaderBoundsMemory(t *testing.T) {
	const max = 64 << 10
	f := newFrameReader(&endless{n: 64 << 20}, frameLines, max, func(int, json.RawMessage) {})
	buf := make([]byte, 4096)
	for {
		_, err := f.Read(buf)
		if cap(f.msg) > 2*max || cap(f.out) > 2*max {
			t.Fatalf("buffers of %d and %d bytes, over twice the bound %d", cap(f.msg), cap(f.out), max)
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
