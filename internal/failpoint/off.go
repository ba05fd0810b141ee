//go:build !failpoints

package failpoint

// Reached marks a step boundary; without the failpoints build tag it does nothing.
func Reached(string) {}
