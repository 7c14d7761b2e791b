package h1

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// bufferBeforeChunking is how much of a body of unknown length the
// response holds: a handler that returns having written no more gets a
// Content-Length, as with net/http (its bufferBeforeChunkingSize).
const bufferBeforeChunking = 2048

// response is the fast path's http.ResponseWriter. It frames a body as
// net/http does: with the Content-Length the handler set, else with one it
// computes when the handler returns having written at most
// bufferBeforeChunking bytes, else (or once the handler flushes) chunked.
//
// Not done as net/http does: trailers, Hijack, and the deadline setters of
// http.ResponseController (they answer http.ErrNotSupported); a request
// body that MaxBytesReader cut short is drained (up to 256 KiB) and the
// connection kept, where net/http closes it (its hook for that is
// unexported); during Shutdown a handler's own Connection field is sent
// as it is.
type response struct {
	c      *conn
	req    *http.Request
	body   *body // nil without a body
	header http.Header

	status      int
	wroteHeader bool  // the final status is chosen and the header fields copied to c.headBuf
	headSent    bool  // the status line and header are in c.bw
	declared    int64 // the handler's Content-Length, -1 none
	written     int64
	buf         []byte // the body while no head is sent and no length declared
	chunked     bool
	closeAfter  bool // the connection closes after this response
	done        bool // the handler has returned
	err         error

	// What the handler's header fields held at WriteHeader.
	hasContentType, hasDate bool
	noSniff                 bool     // Content-Encoding or Transfer-Encoding set: net/http does not sniff
	connection              []string // its Connection field, sent unless the response closes without "close" there
	hasCloseToken           bool
}

var errWriteAfterHandler = errors.New("h1: write after the handler returned")

func (w *response) Header() http.Header { return w.header }

// WriteHeader chooses the status and, as net/http does, takes the header
// fields as they are now: later changes do not reach the client. An
// informational status (1xx but 101) is sent at once.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	if w.wroteHeader || w.done {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInterim(code)
		return
	}
	w.status = code
	w.wroteHeader = true
	w.declared = -1
	if cl := w.header.Get("Content-Length"); cl != "" {
		if n, ok := parseLength([]byte(cl)); ok {
			w.declared = n
		}
	}
	_, w.hasContentType = w.header["Content-Type"]
	_, w.hasDate = w.header["Date"]
	w.noSniff = w.header.Get("Content-Encoding") != "" || w.header.Get("Transfer-Encoding") != ""
	if conn := w.header["Connection"]; len(conn) > 0 {
		w.connection = slices.Clone(conn)
		w.hasCloseToken = hasToken(conn, "close")
		if conn[0] == "close" { // net/http compares it so, case and all
			w.closeAfter = true
		}
	}
	w.c.headBuf = appendHeader(w.c.headBuf[:0], w.header, suppressed(code))
}

// writeInterim sends a 1xx response at once, as net/http does.
func (w *response) writeInterim(code int) {
	b := appendStatus(w.c.bw.AvailableBuffer(), code)
	b = appendHeader(b, w.header, suppressedInterim)
	b = append(b, "\r\n"...)
	_, err := w.c.bw.Write(b)
	if err == nil {
		err = w.c.bw.Flush()
	}
	w.fail(err)
}

func (w *response) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriteAfterHandler
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	switch {
	case w.declared >= 0:
		if w.written+int64(len(p)) > w.declared {
			return 0, http.ErrContentLength
		}
		if !w.headSent {
			w.sendHead(p)
		}
		w.written += int64(len(p))
		n, err := w.c.bw.Write(p)
		w.fail(err)
		return n, err
	case w.chunked:
		w.writeChunk(p)
		return len(p), w.err
	case len(w.buf)+len(p) <= bufferBeforeChunking:
		w.buf = append(w.buf, p...)
		w.written += int64(len(p))
		return len(p), nil
	default:
		w.startChunked(sniffable(w.buf, p))
		w.written += int64(len(p))
		w.writeChunk(p)
		return len(p), w.err
	}
}

// Flush sends what the handler has written; a body whose length is not
// known yet becomes chunked.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (w *response) FlushError() error {
	if w.done {
		return errWriteAfterHandler
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		if w.declared < 0 && bodyAllowed(w.status) {
			w.startChunked(w.buf)
		} else {
			w.sendHead(nil)
		}
	}
	if w.err == nil {
		w.fail(w.c.bw.Flush())
	}
	return w.err
}

func (w *response) startChunked(sniff []byte) {
	w.chunked = true
	w.sendHead(sniff)
	buf := w.buf
	w.buf = nil
	w.writeChunk(buf)
}

func (w *response) writeChunk(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	b := strconv.AppendInt(w.c.bw.AvailableBuffer(), int64(len(p)), 16)
	b = append(b, "\r\n"...)
	_, err := w.c.bw.Write(b)
	if err == nil {
		_, err = w.c.bw.Write(p)
	}
	if err == nil {
		_, err = w.c.bw.WriteString("\r\n")
	}
	w.fail(err)
}

// finish completes the response once the handler has returned, and
// reports whether it was written whole.
func (w *response) finish() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	if !w.headSent {
		if w.declared < 0 && !w.chunked && bodyAllowed(w.status) {
			w.declared = int64(len(w.buf))
		}
		w.sendHead(w.buf)
		if w.err == nil && len(w.buf) > 0 && bodyAllowed(w.status) {
			_, err := w.c.bw.Write(w.buf)
			w.fail(err)
		}
	}
	if w.chunked && w.err == nil {
		_, err := w.c.bw.WriteString("0\r\n\r\n")
		w.fail(err)
	}
	if w.declared >= 0 && w.written < w.declared && bodyAllowed(w.status) {
		// A short body: the client would wait for the rest. net/http
		// closes the connection too.
		w.closeAfter = true
	}
	if w.err == nil {
		w.fail(w.c.bw.Flush())
	}
	return w.err == nil
}

func (w *response) fail(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// sendHead writes the status line and header to the connection's buffer.
// sniff is the start of the body, for a Content-Type the handler did not
// set.
func (w *response) sendHead(sniff []byte) {
	w.headSent = true
	if w.body != nil && !w.closeAfter {
		// As net/http, before the head: what the handler left of the
		// request body is read, or the connection closes after this.
		closeAfter, linger := w.body.discardRest()
		if closeAfter {
			w.closeAfter = true
		}
		if linger {
			w.c.lingerClose = true
		}
	}
	if w.c.srv.inShutdown.Load() {
		w.closeAfter = true
	}
	b := appendStatus(w.c.bw.AvailableBuffer(), w.status)
	b = append(b, w.c.headBuf...)
	if bodyAllowed(w.status) && !w.hasContentType && !w.noSniff && len(sniff) > 0 {
		b = appendField(b, "Content-Type", http.DetectContentType(sniff))
	}
	if !w.hasDate {
		b = append(b, "Date: "...)
		b = append(b, httpDate()...)
		b = append(b, "\r\n"...)
	}
	if w.closeAfter && !w.hasCloseToken {
		b = append(b, "Connection: close\r\n"...)
	} else {
		for _, v := range w.connection {
			b = appendField(b, "Connection", v)
		}
	}
	switch {
	case !bodyAllowed(w.status):
	case w.chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case w.declared >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.declared, 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	_, err := w.c.bw.Write(b)
	w.fail(err)
}

// sniffable is the start of the body, buf then p, that
// http.DetectContentType reads (its first 512 bytes).
func sniffable(buf, p []byte) []byte {
	const n = 512
	if len(buf) >= n || len(p) == 0 {
		return buf
	}
	if len(buf) == 0 {
		return p
	}
	return append(buf[:len(buf):len(buf)], p[:min(len(p), n-len(buf))]...)
}

// The header fields the response frames itself, and those net/http leaves
// out of a response without a body.
// Connection is written by sendHead, which knows whether the response
// closes the connection.
var (
	suppressedFraming = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true}
	suppressed304     = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Content-Type": true}
)

// suppressedInterim: what net/http leaves out of a 1xx response.
var suppressedInterim = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

func suppressed(status int) map[string]bool {
	if status == http.StatusNotModified {
		return suppressed304
	}
	return suppressedFraming
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// hasToken reports whether a comma-separated field value of vs holds
// token, compared without case.
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func appendStatus(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// appendHeader writes h as net/http does: fields with invalid names are
// left out, and line breaks in values become spaces (no response
// splitting).
func appendHeader(b []byte, h http.Header, skip map[string]bool) []byte {
	for k, vs := range h {
		if skip[k] || !validName([]byte(k)) {
			continue
		}
		for _, v := range vs {
			b = appendField(b, k, v)
		}
	}
	return b
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

func appendField(b []byte, k, v string) []byte {
	if strings.ContainsAny(v, "\r\n") {
		v = newlineToSpace.Replace(v)
	}
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, strings.Trim(v, " \t")...)
	return append(b, "\r\n"...)
}

// The Date field changes once a second; it is formatted once a second.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec  int64
	text string
}

func httpDate() string {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.text
	}
	d := &dateValue{sec: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.text
}
