// Package buildinfo says which msgq this is.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version and Commit are set at release time with
// -ldflags "-X github.com/msgq/msgq/internal/buildinfo.Version=v1.2.3 -X ...Commit=abc".
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the linker-set values, falling back to what the Go toolchain
// recorded (a module version for `go install ...@v1.2.3`, a VCS revision for
// a build from a checkout) so that every build can say what it is.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(bi)
}

func get(bi *debug.BuildInfo) Info {
	in := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && in.Commit == "":
				in.Commit = s.Value
			case s.Key == "vcs.time" && in.Date == "":
				in.Date = s.Value
			case s.Key == "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && in.Commit != "" && Commit == "" {
			in.Commit += "-dirty"
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	return in
}
