package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestString_NamesVersionCommitTreeStateAndGo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261201193625-4f49fc08a1b2+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4f49fc08a1b2c3d4e5f60718293a4b5c6d7e8f90"},
			{Key: "vcs.time", Value: "2026-12-01T19:36:25Z"}, {Key: "vcs.modified", Value: "true"}}}
	in := fromBuildInfo("minfer", bi, true)
	got := in.String()
	for _, want := range []string{"minfer v0.0.0-20261201193625-4f49fc08a1b2+dirty ", "commit 4f49fc08a1b2 (2026-12-01T19:36:25Z, modified) ", "go1.26.0 "} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if in.Commit != "4f49fc08a1b2c3d4e5f60718293a4b5c6d7e8f90" || !in.Modified {
		t.Errorf("info %+v", in)
	}
}

func TestString_SaysUnknownWithoutABuildStamp(t *testing.T) {
	got := fromBuildInfo("abtest", nil, false).String()
	if !strings.HasPrefix(got, "abtest unknown commit unknown go") {
		t.Errorf("%q", got)
	}
	clean := fromBuildInfo("minfer", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}, true).String()
	if !strings.HasPrefix(clean, "minfer (devel) commit abc go") {
		t.Errorf("%q", clean)
	}
}
