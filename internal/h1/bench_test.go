package h1_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/h1"
)

// BenchmarkRoundTrip: one JSON POST and its answer on a kept-alive
// connection over loopback, behind the fast path and on net/http alone,
// with the same handler (it reads the body and answers a small JSON
// result with its length declared, as the gateway does). The client is
// the same in both, so the difference per op is the servers'.
//
//	go test -run '^$' -bench RoundTrip -benchmem ./internal/h1/
func BenchmarkRoundTrip(b *testing.B) {
	answer := []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = w.Write(answer)
	})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	req := []byte("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
		"Accept: application/json, text/event-stream\r\nAuthorization: Bearer tb_0123456789abcdef\r\n" +
		"Mcp-Session-Id: 0123456789abcdef0123456789abcdef\r\nMcp-Protocol-Version: 2025-11-25\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)

	for _, bc := range []struct {
		name  string
		paths []string
	}{
		{"net-http", nil},
		{"fast", []string{"/mcp"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			quiet := logrus.New()
			quiet.SetOutput(io.Discard)
			s := h1.New(&http.Server{Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute},
				h1.Options{Paths: bc.paths, Logger: logrus.NewEntry(quiet)})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- s.Serve(ln) }()
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				_ = s.Shutdown(ctx)
				<-served
			}()
			c, err := net.DialTimeout("tcp", ln.Addr().String(), waitFor)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
		})
	}
}
