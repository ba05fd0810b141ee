package mcpserver

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A new token that is not the cluster's own (not a JWT, another issuer's, or
// expired) is reviewed within two budgets: its source address's, then the
// endpoint's. A source gets a quarter of the endpoint's rate and a fifth of its
// burst, so one client flooding junk spends at most that and leaves the rest to
// everyone else; the endpoint's budget still bounds the TokenReviews that many
// sources together cost the API server.
//
// The source is the address the connection comes from. Behind a Service that is
// the client pod's (or node's) address; behind a proxy or an Ingress, and through
// kubectl port-forward, every client shares the proxy's, and so one budget.
// X-Forwarded-For is not read: any client can write it.
const (
	sourceRateShare, sourceBurstShare = 4, 5
	// sourceSweep is how often the buckets of sources that are idle again (full)
	// are dropped, so that the map holds only the sources of the last moments.
	sourceSweep = time.Minute
)

// sourceBuckets are the review budgets of new tokens by source address.
type sourceBuckets struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[netip.Prefix]*rate.Limiter
	swept   time.Time
}

func newSourceBuckets(endpointRate rate.Limit, endpointBurst int) *sourceBuckets {
	return &sourceBuckets{rate: endpointRate / sourceRateShare, burst: max(1, endpointBurst/sourceBurstShare), buckets: map[netip.Prefix]*rate.Limiter{}}
}

// allow spends one review of source's budget, if it has one left.
func (b *sourceBuckets) allow(source netip.Prefix, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.swept) > sourceSweep {
		for p, l := range b.buckets {
			if l.TokensAt(now) >= float64(b.burst) {
				delete(b.buckets, p)
			}
		}
		b.swept = now
	}
	l, ok := b.buckets[source]
	if !ok {
		l = rate.NewLimiter(b.rate, b.burst)
		b.buckets[source] = l
	}
	return l.AllowN(now, 1)
}

// sourceOf is the request's source address: the connection's, an IPv6 one as its
// /64 (one host commonly holds a whole /64). A remote address that cannot be read
// is the zero prefix, one shared bucket.
func sourceOf(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}
