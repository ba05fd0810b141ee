// Package workspace holds the one rule for a path a tool is given: where a call's
// workspace is mounted, and which paths name a place inside it. Validation, policy
// and the in-pod runner all read paths through Rel, so a path the validator accepts
// is the path policy matches and the path the runner opens.
package workspace

import (
	"fmt"
	"path"
	"strings"
)

// Root is where every call's workspace is mounted in its sandbox.
const Root = "/workspace"

// Rel cleans p, a path a tool was given, to a path relative to the workspace ("."
// for the workspace itself). A relative path is relative to the workspace; an
// absolute one must be a root or lie under it. roots are the absolute names of the
// workspace (the runner knows two: where it is mounted, and what that resolves to);
// without any, Root. The check is lexical: a path that leaves the workspace through
// ".." is refused here, and symlinks are checked by the runner where the files are.
func Rel(p string, roots ...string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path contains a NUL byte")
	}
	if len(roots) == 0 {
		roots = []string{Root}
	}
	if path.IsAbs(p) {
		clean := path.Clean(p)
		for _, root := range roots {
			if clean == root {
				return ".", nil
			}
			if rest, ok := strings.CutPrefix(clean, root+"/"); ok {
				return rest, nil
			}
		}
		return "", fmt.Errorf("%q is outside the workspace %s; use a path relative to the workspace", p, roots[0])
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%q is outside the workspace through \"..\"; paths must stay inside it", p)
	}
	return clean, nil
}
