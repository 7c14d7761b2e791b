package bench

import "fmt"

// Memory is what the servers' resident memory did while a run spread its
// calls over new contexts (LoadOptions.Contexts): the RSS (VmRSS) of each
// server process before and after the measured phase. It is what the
// operating system sees, garbage not yet collected included; Go's heap grows
// to about twice its live size between collections, so BytesPerContext is
// an upper bound of what a context keeps alive.
type Memory struct {
	Contexts int `json:"contexts"`
	// RSSBeforeBytes and RSSAfterBytes sum the processes.
	RSSBeforeBytes int64 `json:"rss_before_bytes"`
	RSSAfterBytes  int64 `json:"rss_after_bytes"`
	// BytesPerContext is (after - before) / Contexts.
	BytesPerContext float64         `json:"bytes_per_context"`
	Processes       []ProcessMemory `json:"processes"`
}

// ProcessMemory is one server process's part of Memory.
type ProcessMemory struct {
	PID            int   `json:"pid"`
	RSSBeforeBytes int64 `json:"rss_before_bytes"`
	RSSAfterBytes  int64 `json:"rss_after_bytes"`
	PeakRSSBytes   int64 `json:"peak_rss_bytes"`
}

// memoryProbe holds the readings taken before a phase.
type memoryProbe struct {
	pids   []int
	before []int64
}

// probeMemory reads the RSS of pids; nil when there are none or one cannot
// be read (not Linux, gone).
func probeMemory(pids []int) *memoryProbe {
	if len(pids) == 0 {
		return nil
	}
	p := &memoryProbe{pids: pids}
	for _, pid := range pids {
		rss := currentRSS(pid)
		if rss <= 0 {
			return nil
		}
		p.before = append(p.before, rss)
	}
	return p
}

// finish reads the RSS again; nil when a process cannot be read.
func (p *memoryProbe) finish(contexts int) *Memory {
	if p == nil {
		return nil
	}
	m := &Memory{Contexts: contexts}
	for i, pid := range p.pids {
		after := currentRSS(pid)
		if after <= 0 {
			return nil
		}
		m.Processes = append(m.Processes, ProcessMemory{PID: pid, RSSBeforeBytes: p.before[i], RSSAfterBytes: after, PeakRSSBytes: peakRSS(pid)})
		m.RSSBeforeBytes += p.before[i]
		m.RSSAfterBytes += after
	}
	if contexts > 0 {
		m.BytesPerContext = float64(m.RSSAfterBytes-m.RSSBeforeBytes) / float64(contexts)
	}
	return m
}

// currentRSS reads VmRSS of pid from /proc (0 when it cannot).
func currentRSS(pid int) int64 { return procStatusBytes(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") }
