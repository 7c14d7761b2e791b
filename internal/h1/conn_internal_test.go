package h1

import (
	"io"
	"net"
	"testing"
	"time"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// A connection handed over while its head was late keeps that head's
// deadline: net/http's first deadline is capped by it, later ones are not.
func TestHandoffKeepsHeadDeadline(t *testing.T) {
	limit := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		limit time.Time
		first time.Time
		want  time.Time
	}{
		{"later deadline capped", limit, limit.Add(time.Second), limit},
		{"no deadline capped", limit, time.Time{}, limit},
		{"earlier deadline kept", limit, limit.Add(-time.Second), limit.Add(-time.Second)},
		{"no limit", time.Time{}, limit.Add(time.Second), limit.Add(time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc := &deadlineConn{}
			h := &handoffConn{Conn: dc, limit: tc.limit}
			later := limit.Add(time.Hour)
			_ = h.SetReadDeadline(tc.first)
			_ = h.SetReadDeadline(later)
			if len(dc.set) != 2 || !dc.set[0].Equal(tc.want) || !dc.set[1].Equal(later) {
				t.Fatalf("deadlines set %v, want [%v %v]", dc.set, tc.want, later)
			}
		})
	}
}

// A handed-over connection can be half-closed, as net/http does on its
// own connections to avoid a reset: the peer reads EOF, and can still
// write.
func TestHandoffCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	h := &handoffConn{Conn: server, r: server}
	if err := h.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the peer read %d bytes, %v; want EOF", n, err)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatalf("the peer cannot write after the half-close: %v", err)
	}
}
