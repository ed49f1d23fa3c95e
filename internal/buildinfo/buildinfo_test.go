package buildinfo

import (
	"runtime"
	"testing"
)

func TestGetPrefersLinkerValues(t *testing.T) {
	Version, Commit, Date = "v9.9.9", "abc123", "2026-11-29"
	t.Cleanup(func() { Version, Commit, Date = "", "", "" })
	in := Get()
	if in.Version != "v9.9.9" || in.Commit != "abc123" || in.Date != "2026-11-29" {
		t.Errorf("Get() = %+v, want the linker-set values", in)
	}
}

func TestGetFallsBackToBuildInfo(t *testing.T) {
	in := Get()
	// A test binary's main module has version "(devel)" or empty; either
	// way Get must report something, plus the toolchain and platform.
	if in.Version == "" || in.GoVersion != runtime.Version() || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Get() = %+v", in)
	}
}
