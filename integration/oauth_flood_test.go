package integration

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestOAuthAuthorizeFlood: refused authorization requests, each naming a
// client_id and a redirect_uri of 16 KiB, soon get 429 (they count
// against the address's rate limit), and leave a few short audit records
// that count them all.
func TestOAuthAuthorizeFlood(t *testing.T) {
	srv := startServer(t, server.Config{Audit: server.AuditConfig{FlushInterval: 50 * time.Millisecond}})
	base := "http://" + srv.HTTPAddr().String()
	const flood = 300
	long := strings.Repeat("x", 16<<10)
	client := &http.Client{Timeout: 10 * time.Second}
	statuses := map[int]int{}
	for i := range flood {
		q := url.Values{"client_id": {"tbc_" + strconv.Itoa(i) + long}, "redirect_uri": {"https://e.example/" + long}, "response_type": {"code"}}
		resp, err := client.Get(base + "/oauth/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	if statuses[http.StatusTooManyRequests] < flood-40 {
		t.Fatalf("statuses %v: want 429 for all but the rate limit's first few", statuses)
	}
	q := store.AuditQuery{Kind: store.AuditOAuth, Outcome: "refused"}
	var evs []store.AuditEvent
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
		if len(e.ClientID) > 128 || e.Source != "127.0.0.1" {
			t.Fatalf("record %.300v: want a clipped client_id and the address", e)
		}
	}
}
