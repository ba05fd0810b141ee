package testenv

import "time"

// TB is what Absent needs of a test: a *testing.T, or Ginkgo's GinkgoT().
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// AbsentPoll is how often Absent looks.
const AbsentPoll = 50 * time.Millisecond

// Absent asserts that something did not happen: what (happened says whether it
// did) never happened by a moment that a positive event marks (passed says
// whether the moment has come, and what it saw: the controller wrote the status
// that follows the moment, recorded that it saw the sibling, the tool wrote its
// marker). It waits up to within for the moment, failing at once if what happens
// first, and fails if the moment does not come; once the moment has come, it
// looks at what once more.
//
// It replaces a fixed sleep before an absence check: on a loaded machine a sleep
// may end before the moment it stands for, and the check then passes without
// testing anything. A moment that did not come fails instead.
func Absent(t TB, within time.Duration, moment string, passed func() (bool, string), what string, happened func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	var seen string
	for {
		if happened() {
			t.Fatalf("%s happened (before %s)", what, moment)
			return
		}
		var ok bool
		if ok, seen = passed(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came within %s (last seen: %s): cannot tell whether %s would have happened by then", moment, within, seen, what)
			return
		}
		time.Sleep(AbsentPoll)
	}
	if happened() {
		t.Fatalf("%s happened by %s", what, moment)
	}
}
