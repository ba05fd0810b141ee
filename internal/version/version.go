// Package version says which toolgate build is running. The manager and the kubectl
// plugin report the same string, so that `kubectl toolgate version` can compare them.
package version

import "runtime/debug"

// Version is stamped at build time by the Makefile:
//
//	-ldflags '-X github.com/toolgate/toolgate/internal/version.Version=v0.3.0'
//
// Empty, Get falls back to what the Go toolchain recorded in the binary.
var Version string

// Get returns the stamped version; else the main module's version the go command
// recorded (a tag, or a pseudo-version of the commit, "+dirty" when the tree had
// changes); else the commit alone; else "devel" (go test, go run outside a checkout).
func Get() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(info)
}

func fromBuildInfo(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return "devel"
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified == "true" {
		return "devel-" + revision + "-dirty"
	}
	return "devel-" + revision
}

// Where the manager publishes its version (cmd/manager writes it at start, as the
// leader) and `kubectl toolgate version` reads it: a ConfigMap in the controller's own
// namespace, so that reading it needs nothing but `get` on that one ConfigMap.
const (
	// ConfigMapName is the ConfigMap's name.
	ConfigMapName = "toolgate-controller-version"
	// ConfigMapKey is the key of its data that holds the version.
	ConfigMapKey = "version"
	// DefaultControllerNamespace is the namespace config/default deploys to.
	DefaultControllerNamespace = "toolgate-system"
)
