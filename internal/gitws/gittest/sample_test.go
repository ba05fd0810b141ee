package gittest

import (
	"path/filepath"
	"testing"
)

// The sample is the same wherever it is built, and git itself reads it as built.
func TestBuildSampleIsDeterministicAndSound(t *testing.T) {
	a, err := BuildSample(filepath.Join(t.TempDir(), "a.git"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b.git")
	b, err := BuildSample(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two builds differ: %+v %+v", a, b)
	}
	Git(t, dir, "fsck", "--strict")
	for ref, want := range map[string]string{
		"main":    "README\ncalc.sh\ntest.sh",
		"v1":      "calc.sh\ntest.sh",
		"feature": "calc.sh\nfeature.txt\ntest.sh",
	} {
		if got := Git(t, dir, "ls-tree", "--name-only", ref); got != want {
			t.Errorf("%s holds %q, want %q", ref, got, want)
		}
	}
	if got := Git(t, dir, "rev-parse", "v1^{commit}", "main^", "feature^", "HEAD"); got != a.First+"\n"+a.First+"\n"+a.First+"\n"+a.Second {
		t.Errorf("history: %s", got)
	}
	if got := Git(t, dir, "cat-file", "-t", "v1"); got != "tag" {
		t.Errorf("v1 is a %s, want an annotated tag", got)
	}
	if got := Git(t, dir, "config", "http.receivepack"); got != "true" {
		t.Errorf("http.receivepack %q", got)
	}
}
