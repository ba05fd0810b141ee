package testenv

import (
	"context"
	"fmt"
	"net"
)

// RefuseLookups makes every DNS lookup of this process through net.DefaultResolver
// (which net.Dial and net/http use for a host name) fail, saying that a test
// reached for a resolver. Tests reach no host outside the machine: they name
// addresses, and "localhost" comes from /etc/hosts. A package's TestMain calls it
// before its tests run.
func RefuseLookups() {
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(_ context.Context, network, address string) (net.Conn, error) {
		return nil, fmt.Errorf("a test looked up a host name with the resolver at %s/%s: tests reach no host outside the machine; name an address", network, address)
	}}
}
