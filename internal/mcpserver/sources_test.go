package mcpserver

import (
	"net/http"
	"net/netip"
	"testing"
	"time"
)

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ remote, want string }{
		{"10.244.1.7:41234", "10.244.1.7/32"},
		{"[::ffff:10.244.1.7]:41234", "10.244.1.7/32"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:443", "fe80::/64"},
		{"127.0.0.2", "127.0.0.2/32"},
		{"@", "invalid Prefix"},
	} {
		if got := sourceOf(&http.Request{RemoteAddr: tc.remote}).String(); got != tc.want {
			t.Errorf("source of %q: %s; want %s", tc.remote, got, tc.want)
		}
	}
}

// A source that spent its budget leaves the others theirs; a source idle long
// enough is forgotten, its budget full again.
func TestSourceBuckets(t *testing.T) {
	b := newSourceBuckets(20, 50)
	if b.rate != 5 || b.burst != 10 {
		t.Fatalf("a source's budget: %v a second, burst %d; want 5, 10", b.rate, b.burst)
	}
	now := time.Unix(1_800_000_000, 0)
	flooder, other := netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("10.0.0.2/32")
	allowed := 0
	for range 100 {
		if b.allow(flooder, now) {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("a flood of 100 at once: %d allowed; want the burst, 10", allowed)
	}
	if !b.allow(other, now) {
		t.Fatal("another source was refused after the first spent its budget")
	}
	if !b.allow(flooder, now.Add(200*time.Millisecond)) {
		t.Fatal("the flooder's budget did not refill at its rate")
	}
	later := now.Add(sourceSweep + time.Second)
	if !b.allow(other, later) {
		t.Fatal("refused after a minute idle")
	}
	if _, ok := b.buckets[flooder]; ok || len(b.buckets) != 1 {
		t.Fatalf("after a minute, %d buckets kept; want only the source just seen", len(b.buckets))
	}
}
