package workspace

import (
	"strings"
	"testing"
)

func TestRel(t *testing.T) {
	cases := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "a.go", want: "a.go"},
		{in: "./a/../b", want: "b"},
		{in: "a//b/./c/", want: "a/b/c"},
		{in: ".", want: "."},
		{in: "", want: "."},
		{in: "/workspace", want: "."},
		{in: "/workspace/", want: "."},
		{in: "/workspace/src/x.go", want: "src/x.go"},
		{in: "/workspace/src/../x.go", want: "x.go"},
		{in: "//workspace//a", want: "a"},
		{in: "a/..", want: "."},
		{in: "..a", want: "..a"},
		{in: "a/../..b", want: "..b"},
		{in: "/workspace2/a", wantErr: `"/workspace2/a" is outside the workspace /workspace`},
		{in: "/workspaces", wantErr: `"/workspaces" is outside the workspace /workspace`},
		{in: "/", wantErr: `"/" is outside the workspace /workspace`},
		{in: "/etc/passwd", wantErr: `"/etc/passwd" is outside the workspace /workspace`},
		{in: "/workspace/../etc", wantErr: `"/workspace/../etc" is outside the workspace /workspace`},
		{in: "..", wantErr: `".." is outside the workspace through ".."`},
		{in: "../x", wantErr: `"../x" is outside the workspace through ".."`},
		{in: "a/../../x", wantErr: `"a/../../x" is outside the workspace through ".."`},
		{in: "a\x00b", wantErr: "path contains a NUL byte"},
		{in: "/workspace/a\x00", wantErr: "path contains a NUL byte"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Rel(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Rel(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Rel(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// The runner names the workspace by its mount point and by what that resolves to; an
// absolute path under either is inside, and a refusal names the first.
func TestRelWithTwoRoots(t *testing.T) {
	for in, want := range map[string]string{"/workspace/a": "a", "/var/lib/claim/a": "a", "/var/lib/claim": "."} {
		if got, err := Rel(in, "/workspace", "/var/lib/claim"); err != nil || got != want {
			t.Errorf("Rel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Rel("/var/lib/other", "/workspace", "/var/lib/claim"); err == nil || !strings.Contains(err.Error(), `is outside the workspace /workspace;`) {
		t.Errorf("a path under neither root: %v, want it refused naming /workspace", err)
	}
}
