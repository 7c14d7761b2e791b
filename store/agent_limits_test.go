package store

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

// TestAgentLimits: a limit set is listed, replaced by the next, removed by
// an empty one, and kept across a reopen; bad names are refused.
func TestAgentLimits(t *testing.T) {
	dir := t.TempDir()
	s := openTestStoreIn(t, dir, StoreOptions{})
	ctx := testContext(t)
	if got, err := s.AgentLimits(ctx); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("AgentLimits of a new store = %#v, %v; want an empty map", got, err)
	}
	for _, set := range [][2]string{{"search", "600:50"}, {"files", " 60 "}, {"search", "120:5"}, {"web", "30"}} {
		if err := s.SetAgentLimit(ctx, set[0], set[1]); err != nil {
			t.Fatalf("SetAgentLimit(%q, %q): %v", set[0], set[1], err)
		}
	}
	// Removing one, and removing one never set (the same outcome: no error).
	for _, agent := range []string{"web", "never"} {
		if err := s.SetAgentLimit(ctx, agent, ""); err != nil {
			t.Fatalf("SetAgentLimit(%q, \"\"): %v", agent, err)
		}
	}
	want := map[string]string{"search": "120:5", "files": "60"}
	if got, err := s.AgentLimits(ctx); err != nil || !maps.Equal(got, want) {
		t.Fatalf("AgentLimits = %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][2]string{{"", "60"}, {"a/b", "60"}, {"a+", "60"}, {"ok", strings.Repeat("9", MaxAgentLimitLen+1)}} {
		if err := s.SetAgentLimit(ctx, bad[0], bad[1]); !errors.Is(err, ErrInvalidAgentLimit) {
			t.Errorf("SetAgentLimit(%q, %q) = %v, want ErrInvalidAgentLimit", bad[0], bad[1], err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStoreIn(t, dir, StoreOptions{})
	if got, err := s2.AgentLimits(ctx); err != nil || !maps.Equal(got, want) {
		t.Fatalf("AgentLimits after a reopen = %v, %v; want %v", got, err, want)
	}
}
