package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcStats is what one process spent during a measured phase.
type ProcStats struct {
	// PID of the process; 0 for the harness itself.
	PID int `json:"pid,omitempty"`
	// UserSeconds and SystemSeconds are CPU time used during the phase.
	UserSeconds   float64 `json:"user_seconds"`
	SystemSeconds float64 `json:"system_seconds"`
	// CPUSeconds is UserSeconds + SystemSeconds.
	CPUSeconds float64 `json:"cpu_seconds"`
	// PeakRSSBytes is the resident set high-water mark (VmHWM): over the
	// measured phase for the harness (reset through clear_refs where the
	// kernel allows it, else since process start; see PeakRSSSince), and
	// since process start for a server.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// PeakRSSSince says what PeakRSSBytes covers: "phase" or "process".
	PeakRSSSince string `json:"peak_rss_since,omitempty"`
}

// cpuTimes is a CPU-time reading of one process.
type cpuTimes struct {
	user, sys time.Duration
	ok        bool
}

func (c cpuTimes) sub(o cpuTimes) ProcStats {
	u, s := (c.user - o.user).Seconds(), (c.sys - o.sys).Seconds()
	return ProcStats{UserSeconds: u, SystemSeconds: s, CPUSeconds: u + s}
}

// selfCPU reads this process's CPU time with getrusage(RUSAGE_SELF).
func selfCPU() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{
		user: time.Duration(ru.Utime.Nano()),
		sys:  time.Duration(ru.Stime.Nano()),
		ok:   true,
	}
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times. It is 100 on
// every Linux architecture Go supports; Go has no sysconf to ask.
const clockTick = 10 * time.Millisecond

// procCPU reads another process's CPU time from /proc/<pid>/stat (Linux;
// ok=false elsewhere). Resolution is one clock tick (10 ms).
func procCPU(pid int) cpuTimes {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTimes{}
	}
	// The command name is in parentheses and may hold spaces: split after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return cpuTimes{}
	}
	f := strings.Fields(string(data[i+1:]))
	// Fields after ")" start at field 3 (state); utime and stime are 14 and 15.
	if len(f) < 13 {
		return cpuTimes{}
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTimes{}
	}
	return cpuTimes{user: time.Duration(u) * clockTick, sys: time.Duration(s) * clockTick, ok: true}
}

// peakRSS reads VmHWM of pid ("self" when pid is 0) from /proc (0 when it
// cannot).
func peakRSS(pid int) int64 {
	p := "/proc/self/status"
	if pid != 0 {
		p = fmt.Sprintf("/proc/%d/status", pid)
	}
	if b := procStatusBytes(p, "VmHWM:"); b > 0 {
		return b
	}
	return selfMaxRSS(pid)
}

// procStatusBytes reads one "<key> N kB" line of a /proc status file, in
// bytes (0 when it cannot).
func procStatusBytes(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), key)
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// selfMaxRSS is the getrusage fallback for the harness itself (ru_maxrss is
// in kilobytes on Linux).
func selfMaxRSS(pid int) int64 {
	if pid != 0 {
		return 0
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) << 10
}

// resetPeakRSS asks the kernel to restart this process's VmHWM from the
// current RSS (Linux ≥ 4.0: write "5" to clear_refs), so each scenario gets
// its own peak. It reports whether that worked.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// machineBusy reads the CPU time every process on the machine has used
// (/proc/stat: user+nice+system+irq+softirq+steal), to tell how much of a
// phase's CPU went to processes other than the generator and the server.
func machineBusy() (time.Duration, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, false
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0, false
		}
		busy += v
	}
	return time.Duration(busy) * clockTick, true
}
