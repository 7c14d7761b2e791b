package broker

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

func TestCut(t *testing.T) {
	long := strings.Repeat("a", 64<<10)
	for _, tc := range []struct {
		name, in string
		wantLen  int // at most
		prefix   string
	}{
		{"short", "agent1", 6, "agent1"},
		{"exactly the bound", long[:maxField], maxField, long[:maxField]},
		{"64 KiB", long, maxField + 40, long[:maxField]},
		{"multi-byte rune across the bound", strings.Repeat("a", maxField-1) + "é" + long, maxField + 40, strings.Repeat("a", maxField-1) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cut(tc.in)
			if len(got) > tc.wantLen || !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("cut = %q… (%d bytes), want at most %d bytes starting %q", got[:min(len(got), 20)], len(got), tc.wantLen, tc.prefix[:min(len(tc.prefix), 20)])
			}
		})
	}
	err := cutErr(&net.OpError{Op: "read", Err: errors.New(long)})
	if len(err.Error()) > maxField+40 {
		t.Errorf("cutErr left %d bytes", len(err.Error()))
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Error("cutErr hides the error it cut")
	}
	if cutErr(io.EOF) != io.EOF {
		t.Error("cutErr changed a short error")
	}
}

// fakeConn is a connection from a given address.
type fakeConn struct {
	net.Conn
	remote string
}

func (c *fakeConn) RemoteAddr() net.Addr {
	ap, _ := net.ResolveTCPAddr("tcp", c.remote)
	return ap
}

// A new connection always enters the pre-login budget; when it is spent,
// the connection that waited longest goes, those whose login has begun
// last, and an IPv6 source counts by its /64.
func TestPreauthEvictsOldest(t *testing.T) {
	conn := func(remote string) net.Conn { return &fakeConn{remote: remote} }
	for _, tc := range []struct {
		name      string
		max, per  int
		run       func(p *preauth, c []net.Conn)
		conns     []string
		newcomer  string
		wantGone  int // index into conns; -1: none
		wantCount int
	}{
		{"room left", 4, 4, nil, []string{"127.0.0.2:1", "127.0.0.3:1"}, "127.0.0.4:1", -1, 3},
		{"full in all", 3, 3, nil, []string{"127.0.0.2:1", "127.0.0.3:1", "127.0.0.4:1"}, "127.0.0.5:1", 0, 3},
		{"full for the source", 8, 2, nil, []string{"127.0.0.2:1", "127.0.0.3:1", "127.0.0.2:2"}, "127.0.0.2:3", 0, 3},
		{"full for the /64", 8, 2, nil, []string{"[2001:db8::1]:1", "[2001:db8::2]:1"}, "[2001:db8::3]:1", 0, 2},
		{"a login under way goes last", 3, 3, func(p *preauth, c []net.Conn) { p.started(c[0]) },
			[]string{"127.0.0.2:1", "127.0.0.3:1", "127.0.0.4:1"}, "127.0.0.5:1", 1, 3},
		{"all logins under way", 2, 2, func(p *preauth, c []net.Conn) { p.started(c[1]); p.started(c[0]) },
			[]string{"127.0.0.2:1", "127.0.0.3:1"}, "127.0.0.5:1", 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPreauth(tc.max, tc.per)
			cs := make([]net.Conn, len(tc.conns))
			for i, r := range tc.conns {
				cs[i] = conn(r)
				if gone := p.enter(cs[i]); len(gone) != 0 {
					t.Fatalf("connection %d closed %d others", i, len(gone))
				}
			}
			if tc.run != nil {
				tc.run(p, cs)
			}
			gone := p.enter(conn(tc.newcomer))
			switch {
			case tc.wantGone < 0 && len(gone) != 0:
				t.Errorf("closed %v with room left", gone)
			case tc.wantGone >= 0 && (len(gone) != 1 || gone[0] != cs[tc.wantGone]):
				t.Errorf("closed %v, want connection %d (%s)", gone, tc.wantGone, tc.conns[max(tc.wantGone, 0)])
			}
			if n := p.waiting(); n != tc.wantCount {
				t.Errorf("%d waiting, want %d", n, tc.wantCount)
			}
			for _, c := range cs {
				p.leave(c)
			}
			p.leave(cs[0]) // again: nothing
			if n := p.waiting(); n != 1 || len(p.bySource) != 1 {
				t.Errorf("after all left but the newcomer: %d waiting, %d sources", n, len(p.bySource))
			}
		})
	}
}
