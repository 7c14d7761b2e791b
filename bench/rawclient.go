package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rawConn is a minimal HTTP/1.1 client connection owned by one worker: it
// writes a pre-encoded request in one write and parses the response in
// place. net/http's client spends two extra goroutines, channel handoffs and
// some 30 allocations per request; on a 2-core machine shared with the
// server that is CPU taken from the thing being measured. It understands
// exactly what MCP servers send back: Content-Length or chunked bodies,
// keep-alive or Connection: close. Anything else fails the call and the
// connection is redialled for the next one.
type rawConn struct {
	addr    string
	timeout time.Duration
	conn    net.Conn
	br      *bufio.Reader
	stop    func() bool // stops the context.AfterFunc that unblocks conn
	wbuf    []byte
}

// errRawProtocol is a response the raw client does not understand.
var errRawProtocol = errors.New("unsupported HTTP response")

// rawResponse is what a call needs from a response.
type rawResponse struct {
	status      int
	contentType []byte // valid until the next call on the connection
}

func (c *rawConn) close() {
	if c.conn != nil {
		c.stop()
		c.conn.Close()
		c.conn = nil
	}
}

func (c *rawConn) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn = conn
	// A cancelled run must not wait for the call deadline.
	c.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	return nil
}

// do sends head (request line and headers, ending with "Content-Length: ")
// and body, and reads the response body into out.
func (c *rawConn) do(ctx context.Context, head, body []byte, out *bytes.Buffer) (rawResponse, error) {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return rawResponse{}, err
		}
	}
	c.wbuf = append(c.wbuf[:0], head...)
	c.wbuf = strconv.AppendInt(c.wbuf, int64(len(body)), 10)
	c.wbuf = append(c.wbuf, "\r\n\r\n"...)
	c.wbuf = append(c.wbuf, body...)
	_ = c.conn.SetDeadline(time.Now().Add(c.timeout))
	if ctx.Err() != nil {
		// Cancelled before the line above: the cancel's own deadline (set
		// at dial by AfterFunc) may have been overwritten by it.
		_ = c.conn.SetDeadline(time.Now())
	}
	if _, err := c.conn.Write(c.wbuf); err != nil {
		c.close()
		if ctx.Err() != nil {
			return rawResponse{}, ctx.Err()
		}
		return rawResponse{}, err
	}
	resp, keep, err := c.readResponse(out)
	if err != nil || !keep {
		c.close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return resp, ctx.Err()
		}
		return resp, err
	}
	return resp, nil
}

func (c *rawConn) readResponse(out *bytes.Buffer) (resp rawResponse, keep bool, err error) {
	out.Reset()
	for {
		line, err := c.readLine()
		if err != nil {
			return resp, false, err
		}
		// "HTTP/1.1 200 OK"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return resp, false, fmt.Errorf("%w: status line %q", errRawProtocol, line)
		}
		resp.status, err = strconv.Atoi(string(line[9:12]))
		if err != nil {
			return resp, false, fmt.Errorf("%w: status line %q", errRawProtocol, line)
		}
		keep = line[7] == '1'
		var (
			length  int64 = -1
			chunked bool
		)
		resp.contentType = resp.contentType[:0]
		for {
			h, err := c.readLine()
			if err != nil {
				return resp, false, err
			}
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte{':'})
			if !ok {
				return resp, false, fmt.Errorf("%w: header %q", errRawProtocol, h)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
					return resp, false, fmt.Errorf("%w: Content-Length %q", errRawProtocol, value)
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				if !bytes.EqualFold(value, []byte("chunked")) {
					return resp, false, fmt.Errorf("%w: Transfer-Encoding %q", errRawProtocol, value)
				}
				chunked = true
			case bytes.EqualFold(name, []byte("Content-Type")):
				resp.contentType = append(resp.contentType, value...)
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(value, []byte("close")) {
					keep = false
				}
			}
		}
		if resp.status >= 100 && resp.status < 200 {
			continue // an interim response; the real one follows
		}
		switch {
		case resp.status == 204 || resp.status == 304:
		case chunked:
			err = c.readChunked(out)
		case length >= 0:
			_, err = io.CopyN(out, c.br, length)
		default:
			// Body delimited by the end of the connection.
			_, err = out.ReadFrom(c.br)
			keep = false
		}
		return resp, keep && err == nil, err
	}
}

func (c *rawConn) readChunked(out *bytes.Buffer) error {
	for {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: chunk size %q", errRawProtocol, line)
		}
		if n == 0 {
			for { // trailers, up to the blank line
				t, err := c.readLine()
				if err != nil {
					return err
				}
				if len(t) == 0 {
					return nil
				}
			}
		}
		if _, err := io.CopyN(out, c.br, n); err != nil {
			return err
		}
		if crlf, err := c.readLine(); err != nil || len(crlf) != 0 {
			return fmt.Errorf("%w: chunk not followed by CRLF", errRawProtocol)
		}
	}
}

// readLine returns a line without its CRLF; it is valid until the next read.
func (c *rawConn) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errRawProtocol, c.br.Size())
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// rawHead encodes the request line and headers of a session's tools/call,
// up to and including "Content-Length: ".
func rawHead(s *session) []byte { return rawHeadPath(s, s.tmpl.URL.RequestURI()) }

// rawHeadPath is rawHead with another request path (an entity path of
// LoadOptions.Contexts).
func rawHeadPath(s *session, path string) []byte {
	var b bytes.Buffer
	u := s.tmpl.URL
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: toolbus-bench\r\n", path, u.Host)
	for name, values := range s.tmpl.Header {
		for _, v := range values {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	b.WriteString("Content-Length: ")
	return b.Bytes()
}
