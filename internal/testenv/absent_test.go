package testenv

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a TB that records its failure instead of ending the test.
type fatalRecorder struct{ failure string }

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	if f.failure == "" {
		f.failure = fmt.Sprintf(format, args...)
	}
}

// Absent passes only when the moment came and the thing did not happen: it fails
// when the thing happened before the moment or at it, and when the moment never
// came (a sleep would have passed there without testing anything).
func TestAbsent(t *testing.T) {
	never := func() bool { return false }
	for name, tc := range map[string]struct {
		passed   func() (bool, string)
		happened func() bool
		want     string
	}{
		"the moment came, nothing happened": {func() (bool, string) { return true, "" }, never, ""},
		"it happened before the moment":     {func() (bool, string) { return false, "not yet" }, func() bool { return true }, "the call ran happened (before the call was observed)"},
		"the moment never came":             {func() (bool, string) { return false, "still waiting" }, never, "the call was observed never came within 200ms (last seen: still waiting)"},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fatalRecorder{}
			Absent(f, 200*time.Millisecond, "the call was observed", tc.passed, "the call ran", tc.happened)
			if (tc.want == "") != (f.failure == "") || !strings.Contains(f.failure, tc.want) {
				t.Fatalf("failure %q, want %q", f.failure, tc.want)
			}
		})
	}
	t.Run("it happened by the moment", func(t *testing.T) {
		f := &fatalRecorder{}
		looks := 0
		// Not yet when first looked at; there once the moment came.
		Absent(f, time.Second, "the call was observed", func() (bool, string) { return true, "" }, "the call ran", func() bool { looks++; return looks > 1 })
		if !strings.Contains(f.failure, "the call ran happened by the call was observed") {
			t.Fatalf("failure %q", f.failure)
		}
	})
}

// After RefuseLookups, a host name does not resolve and the error says why; an
// address and localhost still do.
func TestRefuseLookups(t *testing.T) {
	saved := net.DefaultResolver
	t.Cleanup(func() { net.DefaultResolver = saved })
	RefuseLookups()
	if _, err := net.DefaultResolver.LookupHost(t.Context(), "no-such-host.example"); err == nil || !strings.Contains(err.Error(), "tests reach no host outside the machine") {
		t.Fatalf("a lookup of a host name: %v", err)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := net.DefaultResolver.LookupHost(t.Context(), host); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}
