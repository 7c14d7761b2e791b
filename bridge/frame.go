package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// An upstream's answer is read whole before anyone decodes it: the go-sdk
// client reads an HTTP upstream's JSON body without a bound, and ends the
// whole session (every call in flight) on a stdio line or an event over
// its own. So the bridge reads the upstream's messages through a
// frameReader, which passes each message on once it has all of it, and
// replaces one longer than Options.MaxMessage, without keeping it, by an
// error response to the same request: that call fails, the session and the
// other calls go on.

// frameMode is how an upstream's stream is cut into messages.
type frameMode int

const (
	frameLines  frameMode = iota // newline-delimited JSON: a stdio upstream
	frameEvents                  // an event stream: events end with a blank line
	frameBody                    // one message: an HTTP body
)

// frameReader passes the messages of r through, each whole, each at most
// max bytes (delimiters included). A longer one is dropped as it is read,
// scanned for its id, and replaced by a JSON-RPC error response to that id
// if it is a response; other messages that long are dropped (a body: a
// log notification instead, as an empty body would end the session).
type frameReader struct {
	r    io.ReadCloser
	mode frameMode
	max  int
	// over is told about each message over max: its size and its id
	// (nil: none found, or not a response).
	over func(size int, id json.RawMessage)

	chunk  []byte
	msg    []byte // the message being gathered, while it is within max
	size   int    // bytes of the message so far
	drop   bool   // the message is over max: dropped, scanned
	scan   idScanner
	line   int // events: bytes of the current line so far, without its newline
	lineCR bool
	out    []byte // whole messages for Read
	outPos int
	err    error // from r, once out is drained
}

func newFrameReader(r io.ReadCloser, mode frameMode, max int, over func(int, json.RawMessage)) *frameReader {
	return &frameReader{r: r, mode: mode, max: max, over: over}
}

// frameChunk is how much a frameReader reads from its stream at once.
const frameChunk = 32 << 10

func (f *frameReader) Read(p []byte) (int, error) {
	for f.outPos == len(f.out) {
		if f.err != nil {
			return 0, f.err
		}
		if f.chunk == nil {
			f.chunk = make([]byte, frameChunk)
		}
		n, err := f.r.Read(f.chunk)
		f.feed(f.chunk[:n])
		if err != nil {
			if f.size > 0 { // a last line without its newline; a body
				f.end()
			}
			f.err = err
		}
	}
	n := copy(p, f.out[f.outPos:])
	f.outPos += n
	return n, nil
}

func (f *frameReader) Close() error { return f.r.Close() }

func (f *frameReader) feed(b []byte) {
	if f.mode == frameBody {
		f.add(b)
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f.add(b)
			if f.mode == frameEvents {
				f.line += len(b)
				f.lineCR = b[len(b)-1] == '\r'
			}
			return
		}
		f.add(b[:i+1])
		switch f.mode {
		case frameLines:
			f.end()
		case frameEvents:
			f.line += i
			if i > 0 {
				f.lineCR = b[i-1] == '\r'
			}
			if f.line == 0 || (f.line == 1 && f.lineCR) { // a blank line ends the event
				f.end()
			}
			f.line, f.lineCR = 0, false
		}
		b = b[i+1:]
	}
}

// add appends b to the message, or scans it once the message is over max.
func (f *frameReader) add(b []byte) {
	f.size += len(b)
	if !f.drop {
		if f.size <= f.max {
			f.msg = append(f.msg, b...)
			return
		}
		f.drop = true
		f.scan = idScanner{sse: f.mode == frameEvents}
		f.scan.feed(f.msg)
		f.msg = f.msg[:0]
	}
	f.scan.feed(b)
}

// maxKeptBuffer bounds the capacity of a buffer a frameReader keeps
// between messages: one long message must not hold its memory for good.
const maxKeptBuffer = 1 << 20

// end passes the message on, or its replacement.
func (f *frameReader) end() {
	msg := f.msg
	if f.drop {
		id := f.scan.responseID()
		f.over(f.size, id)
		msg = f.replacement(id)
	}
	if f.outPos == len(f.out) && !f.drop {
		// Nothing waits to be read: the message's buffer is read as it is.
		f.out, f.msg = f.msg, f.out[:0]
	} else {
		if f.outPos == len(f.out) {
			f.out = f.out[:0]
		}
		f.out = append(f.out, msg...)
		f.msg = f.msg[:0]
	}
	f.outPos = 0
	if cap(f.msg) > maxKeptBuffer {
		f.msg = nil
	}
	f.size, f.drop = 0, false
}

// replacement is what stands for a message over max: an error response to
// id, or nothing (a body: a log notification).
func (f *frameReader) replacement(id json.RawMessage) []byte {
	text := fmt.Sprintf("the upstream MCP server's answer is %d bytes, more than the bridge reads (%d, --upstream-max-message); ask for less", f.size, f.max)
	var msg []byte
	switch {
	case id != nil:
		e, _ := json.Marshal(map[string]any{"code": -32603, "message": text})
		msg = append(append(append([]byte(`{"jsonrpc":"2.0","id":`), id...), `,"error":`...), e...)
		msg = append(msg, '}')
	case f.mode == frameBody:
		msg, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/message",
			"params": map[string]any{"level": "warning", "logger": clientName, "data": text}})
	default:
		return nil
	}
	switch f.mode {
	case frameLines:
		msg = append(msg, '\n')
	case frameEvents:
		msg = append(append([]byte("event: message\ndata: "), msg...), "\n\n"...)
	}
	return msg
}

// maxIDBytes bounds the id an idScanner keeps.
const maxIDBytes = 256

// idScanner finds the top-level "id" of a JSON-RPC message as it streams
// by, keeping nothing but the id, and whether the message has a "method"
// (a request or a notification, not a response). In an event stream
// (sse) it reads the values of the data fields only.
type idScanner struct {
	sse     bool
	field   [4]byte
	fieldN  int
	inValue bool
	isData  bool

	depth      int
	inStr, esc bool
	wantKey    bool
	inKey      bool
	key        [6]byte
	keyN       int
	capturing  bool
	id         []byte
	idBad      bool
	hasID      bool
	hasMethod  bool
	notObject  bool
	done       bool
}

func (s *idScanner) feed(b []byte) {
	for _, c := range b {
		if s.sse {
			if c == '\n' {
				s.fieldN, s.inValue, s.isData = 0, false, false
				s.json(c)
				continue
			}
			if !s.inValue {
				if c == ':' {
					s.inValue, s.isData = true, s.fieldN == 4 && string(s.field[:]) == "data"
				} else {
					if s.fieldN < len(s.field) {
						s.field[s.fieldN] = c
					}
					s.fieldN++
				}
				continue
			}
			if !s.isData {
				continue
			}
		}
		s.json(c)
	}
}

func (s *idScanner) json(c byte) {
	if s.done || s.notObject {
		return
	}
	if s.capturing {
		if !s.inStr && s.depth == 1 && (c == ',' || c == '}') {
			s.capturing, s.hasID = false, true
		} else if len(s.id) < maxIDBytes {
			s.id = append(s.id, c)
		} else {
			s.idBad = true
		}
	}
	if s.inStr {
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr, s.inKey = false, false
			return
		}
		if s.inKey {
			if s.keyN < len(s.key) {
				s.key[s.keyN] = c
			}
			s.keyN++
		}
		return
	}
	switch c {
	case '"':
		s.inStr = true
		if s.depth == 1 && s.wantKey {
			s.inKey, s.wantKey, s.keyN = true, false, 0
		}
	case ':':
		if s.depth == 1 && s.keyN <= len(s.key) {
			switch string(s.key[:s.keyN]) {
			case "id":
				s.capturing, s.id, s.idBad = true, s.id[:0], false
			case "method":
				s.hasMethod = true
			}
		}
	case ',':
		if s.depth == 1 {
			s.wantKey = true
		}
	case '{', '[':
		if s.depth == 0 && c == '[' {
			s.notObject = true // a batch: no single id
			return
		}
		s.depth++
		if s.depth == 1 {
			s.wantKey = true
		}
	case '}', ']':
		s.depth--
		if s.depth <= 0 {
			s.done = true
		}
	case ' ', '\t', '\r', '\n':
	default:
		if s.depth == 0 {
			s.notObject = true
		}
	}
}

// responseID is the id of a response (no method), a string or a number;
// nil for anything else.
func (s *idScanner) responseID() json.RawMessage {
	if !s.hasID || s.idBad || s.hasMethod || s.notObject {
		return nil
	}
	id := bytes.TrimSpace(s.id)
	if len(id) == 0 || !json.Valid(id) || !(id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9')) {
		return nil
	}
	return append(json.RawMessage(nil), id...)
}
