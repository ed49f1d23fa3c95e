package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// Tests here set the package's linker variables, so they do not run in
// parallel.

func TestGetPrefersLinkerValues(t *testing.T) {
	Version, Commit, Date = "v9.9.9", "abc123", "2026-11-29"
	t.Cleanup(func() { Version, Commit, Date = "", "", "" })
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fff"}}}
	in := get(bi)
	if in.Version != "v9.9.9" || in.Commit != "abc123" || in.Date != "2026-11-29" {
		t.Errorf("get() = %+v, want the linker-set values", in)
	}
}

func TestGetFallsBackToBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
	}{
		{"go install of a tagged module", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}},
			Info{Version: "v1.2.3"}},
		{"a build from a clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-11-29T10:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			Info{Version: "(devel)", Commit: "0123abc", Date: "2026-11-29T10:00:00Z"}},
		{"a build from a modified checkout", &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.modified", Value: "true"}}},
			Info{Version: "(devel)", Commit: "0123abc-dirty"}},
		{"no build information at all", nil, Info{Version: "(devel)"}},
	} {
		got := get(tc.bi)
		tc.want.GoVersion, tc.want.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
		if got != tc.want {
			t.Errorf("%s: get() = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
