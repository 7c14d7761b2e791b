package integration

import (
	"encoding/binary"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// floodCountRE reads the count of an aggregated audit record's reason.
var floodCountRE = regexp.MustCompile(`\(×(\d+) more from [^)]* in [^)]*\)$`)

// refusalsStoodFor is how many refusals records stand for: one each, and
// an aggregated record's count more.
func refusalsStoodFor(evs []store.AuditEvent) int {
	total := 0
	for _, e := range evs {
		total++
		if m := floodCountRE.FindStringSubmatch(e.Reason); m != nil {
			n, _ := strconv.Atoi(m[1])
			total += n - 1
		}
	}
	return total
}

// checkClipped fails on a record with a text field over the audit bound.
func checkClipped(t *testing.T, evs []store.AuditEvent) {
	t.Helper()
	for _, e := range evs {
		for _, v := range []string{e.UserID, e.ClientID, e.TokenID, e.Target, e.Reason, e.Action, e.Source, e.RequestID} {
			if len(v) > 256 {
				t.Fatalf("record with a field of %d bytes: %.200s", len(v), v)
			}
		}
	}
}

// mqttString is an MQTT length-prefixed string.
func mqttString(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}

// rawConnect sends one MQTT 3.1.1 CONNECT with user and client ID and
// waits for the broker's answer or its close.
func rawConnect(t *testing.T, addr, user, clientID string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := append(mqttString("MQTT"), 4, 0xC2, 0, 60) // level 4; user, password, clean session; keepalive 60
	body = append(body, mqttString(clientID)...)
	body = append(body, mqttString(user)...)
	body = append(body, mqttString("not-the-password")...)
	pk := []byte{0x10}
	for n := len(body); ; {
		b := byte(n % 128)
		if n /= 128; n > 0 {
			b |= 0x80
		}
		pk = append(pk, b)
		if n == 0 {
			break
		}
	}
	if _, err := c.Write(append(pk, body...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ack [4]byte
	if _, err := io.ReadFull(c, ack[:]); err == nil && ack[3] == 0 {
		t.Fatal("a login with a wrong password was accepted")
	}
}

// TestAuditFloodMQTTLogins: refused MQTT logins, each with a user name
// and a client ID of 16 KiB, leave a few short audit records that count
// them all, not one large record each.
func TestAuditFloodMQTTLogins(t *testing.T) {
	srv := startServer(t, server.Config{Audit: server.AuditConfig{FlushInterval: 50 * time.Millisecond}})
	const flood = 300
	long := strings.Repeat("u", 16<<10)
	start := time.Now()
	for i := range flood {
		rawConnect(t, srv.MQTTAddr().String(), strconv.Itoa(i)+long, "c"+strconv.Itoa(i)+long)
	}
	t.Logf("%d refused logins in %v", flood, time.Since(start))
	q := store.AuditQuery{Kind: store.AuditMQTTDenied}
	var evs []store.AuditEvent
	// The aggregated records are written when the audit window ends.
	poll(t, 30*time.Second, "every refusal counted", func() bool {
		evs = auditAll(t, srv.Store(), q)
		return refusalsStoodFor(evs) >= flood
	})
	if n := refusalsStoodFor(evs); n != flood {
		t.Fatalf("records stand for %d refusals, want %d", n, flood)
	}
	if len(evs) > 20 {
		t.Fatalf("%d records for %d refusals from one address, want a few", len(evs), flood)
	}
	checkClipped(t, evs)
	for _, e := range evs {
		if e.Action != "connect" || !strings.HasPrefix(e.Reason, "login") {
			t.Errorf("record %+v: want a refused login", e)
		}
	}
}
