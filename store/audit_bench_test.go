package store

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// BenchmarkInsertAudit: one flush of 1000 records (what the audit writer
// does under load), per record. A row per record cost ~30 µs here; a
// segment per flush ~3 µs.
func BenchmarkInsertAudit(b *testing.B) {
	s, err := Open(b.Context(), b.TempDir(), StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	evs := auditAt(time.Now(), 1000, "bench", "platform_echo", "ok")
	for b.Loop() {
		if err := s.InsertAudit(b.Context(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/record")
}

// BenchmarkInsertAuditVaried: as BenchmarkInsertAudit, with what a busy
// gateway's flush holds: 200 users, 50 tools, 10 agents, a few outcomes
// (some 270 key rows per segment: store/audit.go's audit_keys).
func BenchmarkInsertAuditVaried(b *testing.B) {
	s, err := Open(b.Context(), b.TempDir(), StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	evs := auditAt(time.Now(), 1000, "bench", "platform_echo", "ok")
	for i := range evs {
		evs[i].UserID = "user-" + strconv.Itoa(i%200)
		evs[i].Tool = "tool-" + strconv.Itoa(i%50)
		if i%50 < 40 {
			evs[i].Agent = "agent-" + strconv.Itoa(i%10)
		}
		evs[i].Outcome = []string{"ok", "ok", "ok", "ok", "ok", "ok", "ok", "tool_error", "timeout", "error"}[i%10]
	}
	for b.Loop() {
		if err := s.InsertAudit(b.Context(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/record")
}
