// Package version says which build of a program is running, from what the
// Go toolchain stamped into the binary: the module version, the VCS commit
// and whether the tree was modified, and the Go version. minfer and abtest
// print the same line for --version, so a report can name the exact build
// of both.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is a binary's build stamp. Fields the binary does not carry (a test
// binary, a build with -buildvcs=false) are "".
type Info struct {
	Program   string
	Version   string // main module version: a tag, a pseudo-version, or "(devel)"
	Commit    string // vcs.revision
	Time      string // vcs.time, the commit's time (RFC 3339)
	Modified  bool   // vcs.modified: built from a tree with uncommitted changes
	GoVersion string
	Platform  string // GOOS/GOARCH the binary was built for
}

// Read returns the build stamp of the running binary.
func Read(program string) Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(program, bi, ok)
}

// fromBuildInfo is Read on a given build info (ok false: none).
func fromBuildInfo(program string, bi *debug.BuildInfo, ok bool) Info {
	in := Info{Program: program, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return in
	}
	in.Version = bi.Main.Version
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the --version line, e.g.
//
//	minfer v0.0.0-20261201193625-4f49fc08a1b2+dirty commit 4f49fc08a1b2 (2026-12-01T19:36:25Z, modified) go1.26.0 linux/amd64
//
// with "unknown" for what the binary does not carry.
func (i Info) String() string {
	v := i.Version
	if v == "" {
		v = "unknown"
	}
	commit := "unknown"
	if i.Commit != "" {
		commit = i.Commit
		if len(commit) > 12 {
			commit = commit[:12]
		}
		switch {
		case i.Time != "" && i.Modified:
			commit += " (" + i.Time + ", modified)"
		case i.Time != "":
			commit += " (" + i.Time + ")"
		case i.Modified:
			commit += " (modified)"
		}
	}
	return fmt.Sprintf("%s %s commit %s %s %s", i.Program, v, commit, i.GoVersion, i.Platform)
}

// String is Read(program).String(): the line `minfer --version` and
// `abtest --version` print.
func String(program string) string { return Read(program).String() }
