package version

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	const rev = "5ae28d5a1b2c3d4e5f60718293a4b5c6d7e8f901"
	stamped := func(version string, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/portcullis-dev/portcullis", Version: version},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
		line string
	}{
		{"nothing known", nil, Info{Version: "devel"}, "devel"},
		{"go test", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, Info{Version: "devel", Go: "go1.26.0"}, "devel"},
		{"release", stamped("v1.2.0", "false"), Info{Version: "v1.2.0", Revision: rev, Time: "2026-01-02T03:04:05Z", Go: "go1.26.0"}, "v1.2.0 (5ae28d5a1b2c, 2026-01-02T03:04:05Z)"},
		{"pseudo-version, modified", stamped("v0.0.0-20260102030405-5ae28d5a1b2c+dirty", "true"),
			Info{Version: "v0.0.0-20260102030405-5ae28d5a1b2c+dirty", Revision: rev, Time: "2026-01-02T03:04:05Z", Modified: true, Go: "go1.26.0"},
			"v0.0.0-20260102030405-5ae28d5a1b2c+dirty"},
		{"devel with a revision", stamped("(devel)", "true"), Info{Version: "devel", Revision: rev, Time: "2026-01-02T03:04:05Z", Modified: true, Go: "go1.26.0"},
			"devel (5ae28d5a1b2c, 2026-01-02T03:04:05Z, modified)"},
	} {
		got := From(tt.bi)
		if got != tt.want {
			t.Errorf("%s: From = %+v, want %+v", tt.name, got, tt.want)
		}
		if s := got.String(); s != tt.line {
			t.Errorf("%s: String = %q, want %q", tt.name, s, tt.line)
		}
	}
}
