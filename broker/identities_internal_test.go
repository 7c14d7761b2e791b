package broker

import (
	"fmt"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/toolbus/toolbus/acl"
)

func TestIdentitiesPrune(t *testing.T) {
	var r identities
	clients := make([]*mqtt.Client, 2*minPruneAt)
	for i := range clients {
		clients[i] = &mqtt.Client{ID: fmt.Sprint("c", i)}
		r.put(clients[i], acl.Identity{Username: "u"})
	}
	r.put(clients[0], acl.Identity{Username: "again"}) // a replace does not count twice
	if r.len() != len(clients) {
		t.Fatalf("len = %d, want %d", r.len(), len(clients))
	}
	if id, ok := r.get(clients[0]); !ok || id.Username != "again" {
		t.Fatalf("get = %+v %t", id, ok)
	}

	// Odd clients are stale.
	stale := func(cl *mqtt.Client) bool {
		var i int
		_, _ = fmt.Sscanf(cl.ID, "c%d", &i)
		return i%2 == 1
	}
	r.maybePrune(stale)
	if r.len() != len(clients)/2 {
		t.Fatalf("len after prune = %d, want %d", r.len(), len(clients)/2)
	}
	if _, ok := r.get(clients[1]); ok {
		t.Fatal("stale client kept")
	}
	// Not again until the map has doubled.
	calls := 0
	r.maybePrune(func(*mqtt.Client) bool { calls++; return true })
	if calls != 0 {
		t.Fatalf("pruned again after %d entries; want to wait for growth", r.len())
	}
	r.forget(clients[0])
	r.forget(clients[0])
	if r.len() != len(clients)/2-1 {
		t.Fatalf("len after forget = %d", r.len())
	}
}
