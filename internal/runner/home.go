package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A bash call's home is an empty folder made for it outside the workspace, in the
// runner's temporary folder (os.TempDir: the pod's /tmp, an emptyDir), with a fresh
// random name and mode 0700, and removed when the call ends (at its timeout too). A
// runner killed outright (SIGKILL) leaves it behind: a Job's pod goes with it, and a
// session whose runner sent no Result is replaced before its next call.
// HOME and the XDG base folders point into it, and GIT_CONFIG_NOSYSTEM=1 keeps git
// from the image's /etc/gitconfig. The workspace is writable by earlier calls: a
// .gitconfig (an alias or core.sshCommand that runs a program, url.*.insteadOf), a
// .curlrc, .netrc, .npmrc or .ssh/config planted there would otherwise be read as
// the home's by a later call that looks harmless to the human who approves it.
//
// What still reads the workspace: a repository's own .git/config (git reads it in
// any repository it works in), and project files (package.json scripts, a
// Makefile, .npmrc in the project folder, direnv-like files a tool chooses to read).

// homePrefix starts the name of every call's home folder.
const homePrefix = "toolgate-home-"

// makeHome makes the call's home folder in parent (os.TempDir when empty).
func makeHome(parent string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	home, err := os.MkdirTemp(parent, homePrefix) // mode 0700
	if err != nil {
		return "", exceptionf("cannot make the call's home folder in %s: %v", parent, err)
	}
	return home, nil
}

// homeEnv is the environment that points a program's configuration at home.
func homeEnv(home string) map[string]string {
	return map[string]string{
		"HOME":                home,
		"XDG_CONFIG_HOME":     filepath.Join(home, ".config"),
		"XDG_CACHE_HOME":      filepath.Join(home, ".cache"),
		"XDG_DATA_HOME":       filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME":      filepath.Join(home, ".local", "state"),
		"GIT_CONFIG_NOSYSTEM": "1",
	}
}

// homeVariables and homePrefixes name the variables that say where programs find
// their home or configuration: the runner sets the home's, and an invocation's env
// may not set any of them (it could point them back into the workspace). Names are
// compared in upper case: npm reads npm_config_* in either case.
var (
	homeVariables = map[string]bool{
		"HOME": true, "CURL_HOME": true, "WGETRC": true, "NETRC": true, "GNUPGHOME": true,
		"PIP_CONFIG_FILE": true, "CARGO_HOME": true, "RUSTUP_HOME": true, "DOCKER_CONFIG": true,
		"KUBECONFIG": true, "GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_ASKPASS": true,
		"SSH_ASKPASS": true, "GIT_EXEC_PATH": true, "GIT_TEMPLATE_DIR": true, "INPUTRC": true,
		"BASH_ENV": true, "ENV": true,
	}
	homePrefixes = []string{"XDG_", "GIT_CONFIG", "NPM_CONFIG_"}
)

// checkEnvName refuses a variable of the invocation's env that names the call's home
// or configuration.
func checkEnvName(name string) error {
	upper := strings.ToUpper(name)
	reserved := homeVariables[upper]
	for _, p := range homePrefixes {
		reserved = reserved || strings.HasPrefix(upper, p)
	}
	if reserved {
		return exceptionf("invocation field env sets %s: where programs find their home and configuration is the runner's to say (an empty home made for the call, outside the workspace), so an invocation may not set it", name)
	}
	return nil
}

// removeHome removes the call's home once its processes are gone.
func removeHome(home string) error {
	if err := os.RemoveAll(home); err != nil {
		return fmt.Errorf("removing the call's home %s: %w", home, err)
	}
	return nil
}
