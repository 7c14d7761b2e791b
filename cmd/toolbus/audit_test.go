package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// TestAuditByAgent: `toolbus audit --agent A` prints only the calls of
// the tools agent A serves.
func TestAuditByAgent(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, dir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var evs []store.AuditEvent
	for i, agent := range []string{"search", "files", "search", ""} {
		evs = append(evs, store.AuditEvent{Time: now.Add(time.Duration(i) * time.Millisecond), Kind: store.AuditToolCall,
			UserID: "alice", Tool: "t", Agent: agent, Outcome: "ok"})
	}
	if err := st.InsertAudit(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCLI(t, "audit", "--data-dir", dir, "--agent", "search", "--json")
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, stderr)
	}
	var got struct {
		Events []struct {
			Agent string `json:"agent"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Events) != 2 || got.Events[0].Agent != "search" || got.Events[1].Agent != "search" {
		t.Fatalf("records of agent search: %s", out)
	}
}
