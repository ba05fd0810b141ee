// Command gates checks that the tests prove the gates: for each gate of the list
// (hack/gates/gates.yaml), it removes the gate in a throwaway copy of the
// repository, runs the tests the list names, and counts the removal caught when
// they fail. It exits 1 when a removal survives, when an entry's tests fail or skip
// with the gate in place, when a mutation does not compile, or when an entry is
// stale (its anchor is not found exactly once). The checkout is never changed.
// Usage, from the repository's root (make test-gates):
//
//	go run ./hack/gates [-list hack/gates/gates.yaml] [-j 1] [-only REGEXP] [-locate]
//
// Envtest packages need KUBEBUILDER_ASSETS; when it is unset, the newest
// bin/k8s/*/ of the checkout is used, as internal/testenv does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

func main() {
	list := flag.String("list", filepath.Join("hack", "gates", "gates.yaml"), "The gate list.")
	root := flag.String("root", ".", "The repository's root (copied, never changed).")
	jobs := flag.Int("j", 1, "How many removals are tested at once, each in a copy of the repository.")
	only := flag.String("only", "", "Check only the entries whose id matches this regexp.")
	locate := flag.Bool("locate", false, "Only check that every entry's anchor is found exactly once; run nothing.")
	flag.Parse()

	gates, err := LoadList(*list)
	if err != nil {
		fail(err)
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fail(fmt.Errorf("-only: %w", err))
		}
		var some []Gate
		for _, g := range gates {
			if re.MatchString(g.ID) {
				some = append(some, g)
			}
		}
		if len(some) == 0 {
			fail(fmt.Errorf("-only %q matches no entry of %s", *only, *list))
		}
		gates = some
	}
	abs, err := filepath.Abs(*root)
	if err != nil {
		fail(err)
	}
	if *locate {
		if err := Locate(abs, gates); err != nil {
			fail(err)
		}
		fmt.Printf("every anchor of the %d gates of %s is found exactly once\n", len(gates), *list)
		return
	}
	env := os.Environ()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if m, _ := filepath.Glob(filepath.Join(abs, "bin", "k8s", "*", "kube-apiserver")); len(m) > 0 {
			env = append(env, "KUBEBUILDER_ASSETS="+filepath.Dir(m[len(m)-1]))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Printf("checking %d gates of %s, %d at a time\n", len(gates), *list, max(*jobs, 1))
	report, err := Check(ctx, Options{Root: abs, Gates: gates, Jobs: *jobs, Env: env, Progress: os.Stdout})
	if err != nil {
		fail(err)
	}
	fmt.Println("\nremovals caught, per package:")
	for _, s := range report.Scores() {
		fmt.Printf("  %-24s %d/%d\n", s.Package, s.Killed, s.Listed)
	}
	var killed int
	for _, r := range report.Results {
		if r.Outcome == Killed {
			killed++
		}
	}
	fmt.Printf("%d of %d removed gates caught in %s\n", killed, len(report.Results), report.Took.Round(time.Second))
	if !report.OK() {
		fmt.Println("FAIL: a removal survived or an entry could not be checked (above)")
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gates:", err)
	os.Exit(1)
}
