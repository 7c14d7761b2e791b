package buildinfo_test

import (
	"fmt"
	"runtime/debug"
	"testing"

	"github.com/toolbus/toolbus/internal/buildinfo"
)

// Test binaries carry no VCS information, so the formats are checked on
// constructed build infos.
func TestFormat(t *testing.T) {
	vcs := func(rev, at, modified string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
		if at != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.time", Value: at})
		}
		if modified != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return s
	}
	const rev = "6c82b91abcdef0123456789abcdef0123456789a"
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"nil", nil, "(devel)"},
		{"tagged", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs(rev, "2026-11-28T10:50:00Z", "false")}, "v1.2.3"},
		{"pseudo-version kept whole", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261128105000-6c82b91abcde+dirty"}},
			"v0.0.0-20261128105000-6c82b91abcde+dirty"},
		{"devel with VCS", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "2026-11-28T10:50:00Z", "false")},
			"(devel) 6c82b91abcde 2026-11-28T10:50:00Z"},
		{"devel, modified tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "2026-11-28T10:50:00Z", "true")},
			"(devel) 6c82b91abcde+dirty 2026-11-28T10:50:00Z"},
		{"no version, short revision, no time", &debug.BuildInfo{Settings: vcs("abc", "", "")}, "(devel) abc"},
		{"devel without VCS", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildinfo.Format(tc.bi); got != tc.want {
				t.Errorf("Format = %q, want %q", got, tc.want)
			}
		})
	}
}

// A test binary has no module version and no VCS stamp: Version says
// (devel), never "" nor "dev".
func TestVersionOfTestBinary(t *testing.T) {
	if got := buildinfo.Version(); got != buildinfo.Devel {
		t.Errorf("Version() = %q in a test binary, want %q", got, buildinfo.Devel)
	}
}

func ExampleFormat() {
	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/toolbus/toolbus", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "6c82b91abcdef0123456789abcdef0123456789a"},
			{Key: "vcs.time", Value: "2026-11-28T10:50:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	fmt.Println(buildinfo.Format(bi))
	bi.Main.Version = "v1.2.3"
	fmt.Println(buildinfo.Format(bi))
	// Output:
	// (devel) 6c82b91abcde+dirty 2026-11-28T10:50:00Z
	// v1.2.3
}

// TestVCSOf: GET /api/v1/tools names the revision, its commit time and
// the modified flag the toolchain recorded; test binaries record none, so
// the reading is checked on a constructed build info.
func TestVCSOf(t *testing.T) {
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "6c82b91abcdef0123456789abcdef0123456789a"},
		{Key: "vcs.time", Value: "2026-11-28T10:50:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	want := buildinfo.VCS{Revision: "6c82b91abcdef0123456789abcdef0123456789a", Time: "2026-11-28T10:50:00Z", Modified: true}
	if got := buildinfo.VCSOf(bi); got != want {
		t.Errorf("VCSOf = %+v, want %+v", got, want)
	}
	if got := buildinfo.VCSOf(nil); got != (buildinfo.VCS{}) {
		t.Errorf("VCSOf(nil) = %+v, want the zero VCS", got)
	}
}
