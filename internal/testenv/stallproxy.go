package testenv

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// stallBufSize is what one direction of a StallProxy connection reads
// before it writes: once stalled, at most this much is held by the proxy,
// the rest waits in the kernel's buffers and then in the sender's.
const stallBufSize = 32 << 10

// StallProxy is a TCP proxy on 127.0.0.1 that forwards to one address until
// it is stalled: then it stops forwarding in both directions, connections
// stay open and nothing errors, as on a network path that stops carrying
// packets. Resume forwards again what waited. The test's cleanup closes it.
type StallProxy struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed by Close

	mu    sync.Mutex
	gate  chan struct{} // closed while forwarding; open (blocking) while stalled
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loop and every copy goroutine

	closeOnce sync.Once
}

// StartStallProxy listens on 127.0.0.1:0 and forwards every connection to
// target (host:port).
func StartStallProxy(t testing.TB, target string) *StallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("stall proxy: %v", err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &StallProxy{ln: ln, target: target, done: make(chan struct{}), gate: gate, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *StallProxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy as an MQTT broker URL: tcp://host:port.
func (p *StallProxy) URL() string { return "tcp://" + p.Addr() }

// Stall stops forwarding, in both directions, on every connection, current
// and new (new ones are still accepted and dialled).
func (p *StallProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already stalled
	}
}

// Resume forwards again, starting with what waited during the stall.
func (p *StallProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Close stops the proxy: it closes the listener and every connection and
// waits for its goroutines. Idempotent.
func (p *StallProxy) Close() {
	p.closeOnce.Do(func() {
		close(p.done)
		_ = p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// track registers c; it reports false (and closes c) once the proxy is closed.
func (p *StallProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		_ = c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *StallProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *StallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error; Close ends the loop
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c) || !p.track(up) {
			p.untrack(c)
			_ = up.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies from src to dst, waiting at the gate before each write. When
// either side ends or fails both are closed, so the other direction ends too.
func (p *StallProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, stallBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF included: MQTT needs no half-close, and both sides go
		}
	}
}

// wait blocks while the proxy is stalled; false once it is closed.
func (p *StallProxy) wait() bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-p.done:
		return false
	}
}
