package daemon

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildFrom(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/poplimit/poplimit", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "3af8e85"},
			{Key: "vcs.time", Value: "2026-12-01T22:50:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := buildFrom(bi, true)
	want := BuildInfo{Version: "v0.4.0", Revision: "3af8e85", Time: "2026-12-01T22:50:00Z", Modified: true, GoVersion: "go1.26.8"}
	if got != want {
		t.Fatalf("buildFrom = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "v0.4.0 (commit 3af8e85, modified, 2026-12-01T22:50:00Z, go1.26.8)" {
		t.Errorf("String = %q", s)
	}
	clean := buildFrom(&debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "false"}}}, true)
	if clean.Version != "(devel)" || clean.Modified || clean.String() != "(devel) (commit unknown, go1.26.8)" {
		t.Errorf("no version, no revision: %+v %q", clean, clean.String())
	}
	// go install module@latest: no VCS stamp, the commit is in the pseudo-version.
	installed := buildFrom(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201224108-3af8e8536864"}}, true)
	if installed.Revision != "3af8e8536864" || installed.String() != "v0.0.0-20261201224108-3af8e8536864 (commit 3af8e8536864, go1.26.8)" {
		t.Errorf("pseudo-version: %+v %q", installed, installed.String())
	}
	if tagged := buildFrom(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true); tagged.Revision != "" {
		t.Errorf("a tag has no commit in it: %+v", tagged)
	}
	if none := buildFrom(nil, false); none.Version != "unknown" || none.String() != "unknown (commit unknown)" {
		t.Errorf("no build info: %+v %q", none, none.String())
	}
}

// TestVersionOfTestBinary: a test binary has build information, so the
// running toolchain's version is in the string.
func TestVersionOfTestBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("test binary without build information")
	}
	if v := Version(); !strings.Contains(v, bi.GoVersion) {
		t.Errorf("Version() = %q, want it to name %s", v, bi.GoVersion)
	}
}
