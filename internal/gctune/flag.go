package gctune

import (
	"flag"
	"fmt"
)

// FlagName is the toolbus commands' flag for Options.Floor, in MiB.
const FlagName = "gc-heap-floor-mib"

// DefaultFloorMiB is the flag's default.
const DefaultFloorMiB = 64

// FlagVar defines --gc-heap-floor-mib on fs, stored in p.
func FlagVar(fs *flag.FlagSet, p *int) {
	fs.IntVar(p, FlagName, DefaultFloorMiB, "let the heap grow to this many MiB before Go's garbage collector runs (less GC CPU on a small heap; GOGC set in the environment wins); 0 = Go's default pacing")
}

// FloorFromMiB checks the flag's value and returns it as Options.Floor.
func FloorFromMiB(mib int) (int64, error) {
	if mib < 0 {
		return 0, fmt.Errorf("--%s: want 0 or more, got %d", FlagName, mib)
	}
	return int64(mib) << 20, nil
}
