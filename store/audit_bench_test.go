package store

import (
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
