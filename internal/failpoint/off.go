//go:build !failpoints

package failpoint

// Reached marks a step boundary; without the failpoints build tag it does nothing.
func Reached(string) {}

// Enabled says whether this binary was built with failpoints.
const Enabled = false
