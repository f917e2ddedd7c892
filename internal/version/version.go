// Package version says which build of Portcullis is running: the module
// version and the VCS revision, time and state the Go toolchain stamped
// into the binary. The CLI's `portcullis version` prints it; a proxy
// reports it to the gateway, which shows it in `proxies list`.
package version

import (
	"runtime/debug"
	"strings"
)

// Info is a binary's build.
type Info struct {
	// Version is the main module's version: a release tag, a
	// pseudo-version from the VCS ("v0.0.0-20260102030405-5ae28d5a1b2c",
	// with "+dirty" for a modified tree), or "devel" when the toolchain
	// stamped none (go test, -buildvcs=false).
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from ("" when not
	// stamped).
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time, RFC 3339 ("" when not stamped).
	Time string `json:"time,omitempty"`
	// Modified reports a build from a tree with uncommitted changes.
	Modified bool `json:"modified"`
	// Go is the toolchain's version.
	Go string `json:"go,omitempty"`
}

// Devel is the version of a build that carries none.
const Devel = "devel"

// Get returns the running binary's build.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi)
}

// From reads a build from bi (nil: nothing is known).
func From(bi *debug.BuildInfo) Info {
	info := Info{Version: Devel}
	if bi == nil {
		return info
	}
	info.Go = bi.GoVersion
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the build on one line, as a proxy reports it:
// "v1.2.0", or "devel (5ae28d5a1b2c, 2026-01-02T03:04:05Z, modified)"
// when the version does not already name the revision.
func (i Info) String() string {
	if i.Revision == "" {
		return i.Version
	}
	rev := i.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if strings.Contains(i.Version, rev) {
		// A pseudo-version names its commit (and "+dirty" its state).
		return i.Version
	}
	parts := []string{rev}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	if i.Modified {
		parts = append(parts, "modified")
	}
	return i.Version + " (" + strings.Join(parts, ", ") + ")"
}
