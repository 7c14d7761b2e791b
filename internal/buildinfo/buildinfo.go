// Package buildinfo names the build a binary was made from, for
// serverInfo.version, presence and --version. It reads what the Go
// toolchain recorded in the binary (runtime/debug.ReadBuildInfo) and imports
// only the standard library, so that any command may use it.
package buildinfo

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Devel is the version of a build that carries neither a module version
// nor a VCS revision: `go run`, a test binary, a build with
// -buildvcs=false outside a module version.
const Devel = "(devel)"

// Version is the version of the running binary's main module, as Format
// writes it. The build info does not change while a process runs: it is
// read once.
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Devel
	}
	return Format(bi)
})

// Format names the build bi describes:
//
//   - a module version when the toolchain recorded one: "v1.2.3" for a
//     tagged build (`go install module@v1.2.3`), or, since Go 1.24 stamps
//     builds in a checkout, a pseudo-version such as
//     "v0.0.0-20261128105000-6c82b91abcde", with "+dirty" when the work
//     tree had uncommitted changes. It is given as is: it already names
//     the revision and its time, in the form `go version -m` shows.
//   - otherwise "(devel)", followed, when the build has VCS information,
//     by the revision's first 12 characters (with "+dirty" when the tree
//     was modified) and the commit time in RFC 3339:
//     "(devel) 6c82b91abcde+dirty 2026-11-28T10:50:00Z".
//
// A nil bi is Devel.
func Format(bi *debug.BuildInfo) string {
	if bi == nil {
		return Devel
	}
	if v := bi.Main.Version; v != "" && v != Devel {
		return v
	}
	v := VCSOf(bi)
	rev, at, dirty := v.Revision, v.Time, v.Modified
	if rev == "" {
		return Devel
	}
	// Twelve characters, as in a pseudo-version: enough to find the commit.
	if len(rev) > 12 {
		rev = rev[:12]
	}
	var b strings.Builder
	b.WriteString(Devel + " " + rev)
	if dirty {
		b.WriteString("+dirty")
	}
	if at != "" {
		b.WriteString(" " + at)
	}
	return b.String()
}

// VCS is what the toolchain recorded of the source a binary was built
// from (go build's vcs.* settings); zero when it recorded none, as in test
// binaries and -buildvcs=false builds.
type VCS struct {
	Revision string
	// Time is the commit time of Revision (RFC 3339): Go records no build
	// clock, so that builds are reproducible.
	Time string
	// Modified: the work tree had uncommitted changes.
	Modified bool
}

// VCSOf reads bi's VCS settings (nil: none).
func VCSOf(bi *debug.BuildInfo) VCS {
	var v VCS
	if bi == nil {
		return v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// CurrentVCS is this binary's VCS, read once.
var CurrentVCS = sync.OnceValue(func() VCS {
	bi, _ := debug.ReadBuildInfo()
	return VCSOf(bi)
})
