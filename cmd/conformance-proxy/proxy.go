package main

import (
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// newProxy forwards every request to target with "Authorization: Bearer
// token" and nothing else changed that the gateway judges: the client's Host
// and Origin reach the gateway as sent, so its DNS-rebinding checks see the
// conformance suite's own headers (the suite's dns-rebinding-protection
// scenario sends a foreign Host and Origin and expects the gateway, not the
// proxy, to refuse them).
func newProxy(target *url.URL, token string, tr http.RoundTripper, log *logrus.Entry) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// SetURL points Host at the target; the gateway must see the
			// client's Host instead.
			r.Out.Host = r.In.Host
			// Replaced rather than added: a second Authorization header
			// would make the gateway's choice of token ambiguous.
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		Transport: tr,
		// Negative: flush after every write, so each SSE event reaches the
		// client when the gateway sends it.
		FlushInterval: -1,
		// Errors while copying a body (after the status went out) are only
		// reported through ErrorLog.
		ErrorLog: stdlog.New(logWriter{log}, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The client went away (the suite closes streams it is done
				// with): nobody is left to answer.
				return
			}
			log.WithError(err).WithField("method", r.Method).WithField("path", r.URL.Path).Warn("forwarding failed")
			http.Error(w, "conformance-proxy: the gateway is not reachable: "+err.Error(), http.StatusBadGateway)
		},
	}
}

// newTransport talks to the gateway only. It has no response or idle
// deadlines on the stream itself (SSE answers stay open as long as the
// gateway keeps them), no environment proxy (the target is on loopback) and
// no transparent compression (Accept-Encoding reaches the gateway as the
// client sent it, and nothing is decoded on the way back).
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// fullDuplex lets the proxy's transport go on reading the client's request
// body after the gateway's answer has started. By default Go's HTTP/1 server
// drains and closes a request body when the handler writes the response
// headers; but the transport, having copied the body's declared length to
// the gateway, reads it once more to check its end, and when a quick answer
// gets in first that read fails ("invalid Read on closed Body"), the
// transport tears the upstream connection down and the answer is cut off
// mid-stream (the suite saw "terminated"; golang/go#40747).
func fullDuplex(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTP/2 writers do not support it and need not (HTTP/2 is always
		// full duplex), so an error leaves nothing to do.
		_ = http.NewResponseController(w).EnableFullDuplex()
		next.ServeHTTP(w, r)
	})
}

// logRequests logs every request with what the gateway answered, so a
// failed scenario can be traced through the proxy afterwards
// (results/conformance/logs/proxy.log).
func logRequests(next http.Handler, log *logrus.Entry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		start := time.Now()
		defer func() {
			fields := logrus.Fields{
				"method": r.Method, "path": r.URL.Path, "host": r.Host, "mcpMethod": r.Header.Get("Mcp-Method"),
				"status": sw.status, "bytes": sw.bytes, "ms": time.Since(start).Milliseconds(),
			}
			if p := recover(); p != nil {
				// ReverseProxy aborts a response it could not finish
				// (http.ErrAbortHandler); the client sees the connection
				// close. Logged, then passed on unchanged. The suite often
				// closes a stream once it has what it wanted: that is no
				// fault.
				entry := log.WithFields(fields).WithField("abort", fmt.Sprint(p))
				if r.Context().Err() != nil {
					entry.Info("client went away")
				} else {
					entry.Warn("response aborted")
				}
				panic(p)
			}
			log.WithFields(fields).Info("forwarded")
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter records the status and size of a response. Unwrap lets
// http.ResponseController (which ReverseProxy flushes through) reach the
// real writer.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 || w.status < 200 { // 1xx may precede the final status
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logWriter turns the standard logger's lines (ReverseProxy's ErrorLog) into
// warnings of log.
type logWriter struct{ log *logrus.Entry }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}
