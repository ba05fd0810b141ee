package server

import (
	"crypto/tls"
	"fmt"

	certutil "k8s.io/client-go/util/cert"
)

// selfSigned makes a serving certificate for names, signed by a CA made for it,
// and returns it with the bundle that verifies it (the APIService's caBundle).
// The key is never written anywhere: a restart makes a new one and publishes the
// new bundle.
func selfSigned(names []string) (*tls.Certificate, []byte, error) {
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("archive API: a self-signed certificate needs the Service's DNS name")
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(names[0], nil, names[1:])
	if err != nil {
		return nil, nil, fmt.Errorf("archive API: making a serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	// certPEM holds the serving certificate and the CA that signed it.
	return &cert, certPEM, nil
}
