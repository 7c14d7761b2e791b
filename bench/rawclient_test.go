package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptedServer answers each request on a connection with the next
// response of script, verbatim, and closes the connection after a response
// whose entry ends with closeMark. It reads requests with Content-Length.
const closeMark = "<close>"

func scriptedServer(t *testing.T, script []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("scripted server did not stop")
		}
	})
	go func() {
		defer close(done)
		next := 0
		for next < len(script) {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(conn)
			for next < len(script) {
				if err := readRequest(br); err != nil {
					break
				}
				resp, closeAfter := strings.CutSuffix(script[next], closeMark)
				next++
				if _, err := io.WriteString(conn, resp); err != nil || closeAfter {
					break
				}
			}
			conn.Close()
		}
	}()
	return ln.Addr().String()
}

func readRequest(br *bufio.Reader) error {
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	_, err := io.CopyN(io.Discard, br, int64(n))
	return err
}

func TestRawConn(t *testing.T) {
	const sse = "event: message\ndata: {}\n\n"
	script := []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(sse)-5), 16) + ";ext=1\r\n" + sse[:len(sse)-5] + "\r\n5\r\n" + sse[len(sse)-5:] + "\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye" + closeMark,
		"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}" + closeMark,
		"HTTP/1.1 204 No Content\r\n\r\n",
		"SPDY/9 200 OK\r\n\r\n" + closeMark,
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	}
	want := []struct {
		status int
		ct     string
		body   string
		err    bool
	}{
		{200, "application/json", "{}", false},
		{200, "text/event-stream", sse, false},
		{404, "", "nope", false},
		{200, "", "bye", false},
		{200, "application/json", `{"a":1}`, false},
		{204, "", "", false},
		{0, "", "", true},
		{200, "", "ok", false},
	}
	c := &rawConn{addr: scriptedServer(t, script), timeout: 5 * time.Second}
	defer c.close()
	head := []byte("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: ")
	ctx := testContext(t)
	var out bytes.Buffer
	for i, w := range want {
		resp, err := c.do(ctx, head, []byte(`{"x":1}`), &out)
		if w.err {
			if !errors.Is(err, errRawProtocol) {
				t.Errorf("response %d: err = %v, want errRawProtocol", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if resp.status != w.status || string(resp.contentType) != w.ct || out.String() != w.body {
			t.Errorf("response %d: %d %q %q, want %d %q %q", i, resp.status, resp.contentType, out.String(), w.status, w.ct, w.body)
		}
	}
}

func TestRawConnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			accepted <- conn // never answers
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	c := &rawConn{addr: ln.Addr().String(), timeout: time.Minute}
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := c.do(ctx, []byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "), nil, new(bytes.Buffer))
		errc <- err
	}()
	t.Cleanup(func() { // c is the goroutine's until do returns
		cancel()
		select {
		case <-done:
			c.close()
		case <-time.After(time.Minute):
		}
	})
	select {
	case conn := <-accepted:
		defer conn.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no connection")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled call kept waiting")
	}
}
