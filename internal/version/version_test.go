package version

import (
	"runtime/debug"
	"testing"
)

// The stamp itself (-X, set by the Makefile) is checked end to end by
// hack/krewrelease: the installed plugin must print the VERSION it was released as.
func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"a tagged module", debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"a commit", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}}, "devel-0123456789ab"},
		{"a changed tree", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "devel-0123456789ab-dirty"},
		{"nothing recorded", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuildInfo(&tc.info); got != tc.want {
				t.Fatalf("fromBuildInfo = %q, want %q", got, tc.want)
			}
		})
	}
}
