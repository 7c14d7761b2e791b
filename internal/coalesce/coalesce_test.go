package coalesce

import "testing"

func TestSwitch(t *testing.T) {
	var s Switch
	for i := range Off {
		if !s.On() || !s.Yield() {
			t.Fatalf("off after %d writes of one packet, want on until %d", i, Off)
		}
		s.Wrote(1)
	}
	if s.On() {
		t.Fatalf("on after %d writes of one packet", Off)
	}
	s.Wrote(0) // no packet: no news
	probes := 0
	for range 2 * Probe {
		if s.Yield() {
			probes++
		}
		s.Wrote(1)
	}
	if probes != 2 {
		t.Fatalf("%d of %d writes yielded while off, want 2", probes, 2*Probe)
	}
	s.Wrote(2)
	if !s.On() {
		t.Fatal("off after a write of two packets")
	}
}
