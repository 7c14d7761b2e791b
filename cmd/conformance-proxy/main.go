// Command conformance-proxy lets the official MCP conformance suite test a
// gateway that requires a token. The suite sends no Authorization header and
// has no option to add one, and the gateway has (on purpose) no switch that
// turns authentication off; this reverse proxy adds "Authorization: Bearer
// <token>" to every request and changes nothing else the gateway judges:
// Host and Origin pass exactly as the suite sent them, so the gateway's own
// DNS-rebinding checks are what the suite measures, and SSE answers stream
// through event by event.
//
//	TOOLBUS_PROXY_TOKEN=... conformance-proxy --target http://127.0.0.1:8080
//
// It prints "conformance-proxy: http://ADDR -> TARGET" on stdout once it
// listens (--listen 127.0.0.1:0 picks a free port). scripts/conformance.sh
// (make conformance) runs it; it is a test harness, not a way to deploy the
// gateway.
//
// Every flag also reads the environment variable TOOLBUS_PROXY_<FLAG>
// (e.g. TOOLBUS_PROXY_TOKEN, which keeps the token out of the process list);
// a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/envflag"
	"github.com/toolbus/toolbus/internal/logutil"
)

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "TOOLBUS_PROXY_"

// shutdownTimeout bounds the wait for open streams on exit; the suite has
// finished by then, so whatever is still open is dropped.
const shutdownTimeout = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "conformance-proxy:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	listen    string
	target    *url.URL
	token     string
	logLevel  logrus.Level
	logFormat string
}

// parseFlags reads args, then TOOLBUS_PROXY_<FLAG> for every flag not on the
// command line.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var (
		c                           config
		target, logLevel, logFormat string
	)
	fs := flag.NewFlagSet("conformance-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "listen address (port 0 picks a free one)")
	fs.StringVar(&target, "target", "", "base URL of the gateway, e.g. http://127.0.0.1:8080 (required)")
	fs.StringVar(&c.token, "token", "", "bearer token added to every request (prefer the environment variable "+envPrefix+"TOKEN)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "json", "log format: json or text")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := envflag.Apply(fs, envPrefix, getenv); err != nil {
		return config{}, err
	}
	if target == "" {
		return config{}, errors.New("--target is required")
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return config{}, fmt.Errorf("--target: want http://host:port, got %q", target)
	}
	c.target = u
	if c.token == "" {
		return config{}, errors.New("--token (or " + envPrefix + "TOKEN) is required")
	}
	if c.logLevel, err = logrus.ParseLevel(logLevel); err != nil {
		return config{}, fmt.Errorf("--log-level: %w", err)
	}
	if logFormat != "json" && logFormat != "text" {
		return config{}, fmt.Errorf("--log-format: want json or text, got %q", logFormat)
	}
	c.logFormat = logFormat
	return c, nil
}

// run serves until ctx is done (SIGINT/SIGTERM in main).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := logrus.New()
	logger.Out = stderr
	logger.Level = c.logLevel
	if c.logFormat == "json" {
		logger.Formatter = &logrus.JSONFormatter{}
	}
	log := logrus.NewEntry(logger).WithField("component", "conformance-proxy")

	p, err := start(c.listen, c.target, c.token, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "conformance-proxy: http://%s -> %s\n", p.Addr(), c.target)
	select {
	case <-ctx.Done():
	case err := <-p.done:
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	return p.Close(shutdownCtx)
}

// proxyServer is a listening proxy; Close stops it.
type proxyServer struct {
	ln   net.Listener
	srv  *http.Server
	tr   *http.Transport // to the gateway; its idle connections are closed in Close
	done chan error      // receives Serve's result once, then is closed
}

// start listens on addr and serves the proxy in a goroutine that Close stops.
func start(addr string, target *url.URL, token string, log *logrus.Entry) (*proxyServer, error) {
	log = logutil.OrDiscard(log)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	tr := newTransport()
	p := &proxyServer{
		ln: ln,
		tr: tr,
		srv: &http.Server{
			Handler: logRequests(fullDuplex(newProxy(target, token, tr, log)), log),
			// Only the header read has a deadline: SSE answers and long
			// tool calls must not be cut by a read or write timeout.
			ReadHeaderTimeout: 10 * time.Second,
		},
		done: make(chan error, 1),
	}
	go func() {
		defer close(p.done)
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.done <- err
		}
	}()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *proxyServer) Addr() net.Addr { return p.ln.Addr() }

// Close waits for requests in flight until ctx ends, then drops them.
func (p *proxyServer) Close(ctx context.Context) error {
	err := p.srv.Shutdown(ctx)
	if err != nil {
		// Streams still open at the deadline are dropped on purpose: the
		// suite is done with them.
		closeErr := p.srv.Close()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = closeErr
		}
	}
	<-p.done
	p.tr.CloseIdleConnections()
	return err
}
