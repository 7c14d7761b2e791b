package broker

import (
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/time/rate"
)

// Past its rate, sparseLog leaves lines out and counts them; the next line
// it writes says how many.
func TestSparseLog(t *testing.T) {
	l, hook := test.NewNullLogger()
	s := newSparseLog(0, 3) // three lines, then none until the limit changes
	for range 10 {
		if e := s.entry(logrus.NewEntry(l)); e != nil {
			e.Info("login refused")
		}
	}
	s.lim.SetLimit(rate.Inf)
	s.entry(logrus.NewEntry(l)).Info("login refused")
	entries := hook.AllEntries()
	if len(entries) != 4 {
		t.Fatalf("%d lines written, want 3 then 1", len(entries))
	}
	if n := entries[3].Data["notLoggedBefore"]; n != int64(7) {
		t.Errorf("the line after the pause says %v left out, want 7", n)
	}
	if _, ok := entries[2].Data["notLoggedBefore"]; ok {
		t.Error("a line with nothing left out before it has a count")
	}
}
