//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

var (
	mu     sync.Mutex
	target string
	after  = 1
	hits   int
)

func init() {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return
	}
	name, n, found := strings.Cut(spec, ":")
	target = name
	if found {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "%s=%q: the count after the colon must be a whole number of 1 or more\n", EnvVar, spec)
			os.Exit(2)
		}
		after = v
	}
}

// Reached ends the process when name is the failpoint asked for and this is the
// asked-for hit. Nothing is flushed or cleaned up: it stands for a crash.
func Reached(name string) {
	mu.Lock()
	defer mu.Unlock()
	if name != target {
		return
	}
	hits++
	if hits == after {
		fmt.Fprintf(os.Stderr, "failpoint %s reached (hit %d): exiting with code %d\n", name, hits, ExitCode)
		os.Exit(ExitCode)
	}
}
