package daemon

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
)

// pseudoRev is the commit at the end of a pseudo-version such as
// v0.0.0-20261201224108-3af8e8536864 (optionally +dirty).
var pseudoRev = regexp.MustCompile(`-(?:0\.)?[0-9]{14}-([0-9a-f]{12})(?:\+dirty)?$`)

// BuildInfo is what a binary knows about its own build, from the Go
// toolchain's build information (runtime/debug.ReadBuildInfo): nothing is
// set by hand or by linker flags, so `go install ...@version`, `go build`
// in a clone and `make build` all report the truth.
type BuildInfo struct {
	// Version is the main module's version: the tag or pseudo-version
	// under `go install module/cmd/x@v`, the VCS-derived pseudo-version
	// (with "+dirty" for a modified tree) under `go build` in a clone,
	// "(devel)" when no version control information was available.
	Version string
	// Revision is the VCS commit (vcs.revision); without one (a module
	// downloaded by `go install ...@latest` carries no VCS stamp), the
	// 12-digit commit of a pseudo-version; "" when unknown.
	Revision string
	// Time is the commit's time (vcs.time, RFC 3339), "" when unknown.
	Time string
	// Modified reports uncommitted changes in the tree that was built
	// (vcs.modified).
	Modified bool
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
}

// Build returns the running binary's BuildInfo. A binary built without
// module support (never the case for this module's commands) reports
// Version "unknown".
func Build() BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	return buildFrom(bi, ok)
}

// buildFrom is Build over the build information bi (ok false: none).
func buildFrom(bi *debug.BuildInfo, ok bool) BuildInfo {
	if !ok || bi == nil {
		return BuildInfo{Version: "unknown"}
	}
	b := BuildInfo{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	if m := pseudoRev.FindStringSubmatch(b.Version); b.Revision == "" && m != nil {
		b.Revision = m[1]
	}
	return b
}

// String is the one-line version every command's --version prints after
// its name, e.g.
//
//	v0.0.0-20261201225000-3af8e8536864 (commit 3af8e8536864c83ed94b2610499fb94d21bd0c4c, 2026-12-01T22:50:00Z, go1.26.8)
//
// with ", modified" after the commit when the tree was dirty and
// "commit unknown" when the build had no VCS information (e.g. go build
// -buildvcs=false, or a source tarball).
func (b BuildInfo) String() string {
	parts := []string{"commit unknown"}
	if b.Revision != "" {
		parts[0] = "commit " + b.Revision
	}
	if b.Modified {
		parts = append(parts, "modified")
	}
	if b.Time != "" {
		parts = append(parts, b.Time)
	}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	return fmt.Sprintf("%s (%s)", b.Version, strings.Join(parts, ", "))
}

// Version is Build().String(): what a command sets as its cli.App's
// Version, so that `<command> --version` prints "<command> version
// <Version()>".
func Version() string { return Build().String() }
