// Package netsrc says which source a remote address counts as for the
// per-source bounds of the broker, the OAuth server and the audit log:
// one key per IPv4 address and per IPv6 /64, since one host commonly holds
// a whole /64 and may pick any address in it. ClientKey says it of an
// HTTP request's client, behind trusted reverse proxies too.
package netsrc

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/internal/clip"
)

// maxOther bounds the key of an address that is no IP address (a Unix
// socket path, say).
const maxOther = 128

// Key is what remote (host:port, or a bare host) counts as: its IP
// address; an IPv6 address by its /64; an IPv4-mapped IPv6 address as the
// IPv4 address. A remote that is no IP address is its own key, cut short.
func Key(remote string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return clip.String(host, maxOther)
	}
	return KeyOf(a)
}

// KeyOf is Key of a parsed address.
func KeyOf(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64) // 64 bits fit an IPv6 address: no error
		return p.String()
	}
	return a.String()
}

// ClientKey is the Key of the client of r: the connection's peer or, when
// the peer is one of the trusted reverse proxies, the nearest address in
// X-Forwarded-For that is not. Hops are read from the nearest one back,
// and reading stops at one that is no address: whatever comes before it is
// the client's to write. With no trusted proxies the header is ignored.
func ClientKey(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return clip.String(host, maxOther)
	}
	if isTrusted(trusted, ip) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // a hop we cannot read: trust nothing before it
			}
			ip = hop
			if !isTrusted(trusted, ip) {
				break
			}
		}
	}
	return KeyOf(ip)
}

func isTrusted(trusted []netip.Prefix, ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(ip) })
}
