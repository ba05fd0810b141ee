package policy

import (
	"testing"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// nohup appends the command's output to ./nohup.out (or $HOME/nohup.out) when its
// output is a terminal, which the classifier cannot see: run on a terminal,
// nohup ls created nohup.out.
func TestNohupWritesNohupOut(t *testing.T) {
	exactly(t, v1alpha1.CategoryWrite, "nohup ls", "nohup cat notes.txt", "nohup -- grep -r x .")
	exactly(t, v1alpha1.CategoryDelete, "nohup rm notes.txt")
}

// uv run and poetry run put the project's environment first on PATH, so every
// program run by name under them, in a nested shell too, may be a file of the
// workspace (.venv/bin/ls): uv run --no-sync ls ran .venv/bin/ls.
func TestWrappersThatChangePATHRunTheProjectsPrograms(t *testing.T) {
	exactly(t, v1alpha1.CategoryBuild, "uv run --no-sync ls", "uv run --no-sync cat notes.txt",
		"uv run --no-sync bash -c 'cat notes.txt | wc -l'", "uv run --no-sync env grep x f")
	exactly(t, v1alpha1.CategoryTest, "uv run --no-sync pytest -q")
	exactly(t, v1alpha1.CategoryWrite, "poetry run ls")
	exactly(t, v1alpha1.CategoryInstall, "uv run ls")
	// What the wrapped command does itself still counts.
	exactly(t, v1alpha1.CategoryDelete, "uv run --no-sync rm notes.txt")
}

// Each package manager by its own tables, read from the tool (npm 11, yarn 1.22
// and 4.18, pnpm 9 and 10, bun 1.4) in a project whose package.json had a script
// "touch ran-NAME" for each NAME: yarn root, yarn ls, yarn prefix, pnpm explain,
// bun ls and bun root ran the script; yarn why and yarn --version ran the file
// .yarnrc.yml's yarnPath names (yarn 1: .yarnrc's yarn-path); pnpm ls, root, bin,
// config get and --version loaded .pnpmfile.cjs. All of them were read-only when
// npm's table stood for every package manager.
func TestEachPackageManagerHasItsOwnTables(t *testing.T) {
	exactly(t, v1alpha1.CategoryBuild,
		// Not a command of that tool: a package script.
		"yarn root", "yarn ls", "yarn ll", "yarn prefix", "pnpm explain", "pnpm workspaces",
		"bun ls", "bun root", "bun prefix", "bun explain", "bun config get x",
		// Every command of yarn and pnpm runs project code first.
		"yarn why left-pad", "yarn --version", "yarn -v", "yarn bin", "yarn config get registry",
		"pnpm ls", "pnpm list --depth 0", "pnpm why left-pad", "pnpm root", "pnpm bin", "pnpm config get registry",
		"pnpm --version", "pnpm -v", "pnpm",
		"npm start", "pnpm start",
	)
	exactly(t, v1alpha1.CategoryTest, "yarn test", "pnpm test", "bun test", "npm test", "yarn lint", "bun lint")
	// A command of yarn 1 only is a script for yarn 4; one of bun 1.4 only, a script
	// for older bun.
	exactly(t, v1alpha1.CategoryUnknown, "yarn list", "yarn explain", "bun why left-pad", "bun list", "bun exec 'touch pwned'", "bun pm cache rm")
	exactly(t, v1alpha1.CategoryReadOnly,
		"npm ls", "npm ls --depth 0", "npm why left-pad", "npm root -g", "npm config get registry", "npm run", "npm --version",
		"bun pm ls", "bun pm ls --all", "bun pm bin -g", "bun --version")
	exactly(t, v1alpha1.CategoryInstall, "yarn", "bun", "yarn add left-pad", "pnpm install", "bun add x", "npm ci")
}

// Wrappers declare what they add, and a transparent one adds nothing: the wrapped
// command's category is the call's.
func TestTransparentWrappersAddNothing(t *testing.T) {
	exactly(t, v1alpha1.CategoryReadOnly, "nice ls", "nice -n 5 cat notes.txt", "stdbuf -oL grep x notes.txt",
		"ionice -c3 wc -l notes.txt", "command ls", "exec cat notes.txt", "env LANG=C sort notes.txt")
	exactly(t, v1alpha1.CategoryWrite, "nice sort notes.txt -o out.txt", "stdbuf -o0 sed p notes.txt -i",
		"timeout --foreground 5 sort notes.txt --out=owned.txt")
}

// go vet -vettool, go test -exec and -toolexec run the program they name on the
// command line (go vet -vettool=./payload.sh ran payload.sh), as cargo --config and
// make --eval do: not the project's tests or build, whatever the subcommand, and
// after the packages too (go test reads flags after them).
func TestGoFlagsThatRunTheProgramTheyName(t *testing.T) {
	exactly(t, v1alpha1.CategoryUnknown, "go vet -vettool=./payload.sh ./...", "go vet -vettool ./payload.sh .",
		"go test -exec ./payload.sh ./...", "go test ./... -exec=./payload.sh", "go test --exec ./payload.sh .",
		"go build -toolexec=./payload.sh .", "go run -exec ./payload.sh .", "go list -toolexec ./payload.sh ./...")
	exactly(t, v1alpha1.CategoryTest, "go test ./...", "go test -run Exec ./...", "go vet ./...")
}
