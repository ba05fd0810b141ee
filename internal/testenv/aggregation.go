package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// FrontProxyName is the common name of the front proxy's client certificate: the
// one name --requestheader-allowed-names lets an aggregated API believe.
const FrontProxyName = "front-proxy-client"

// WithAggregation configures the kube-apiserver's aggregation layer as a cluster's
// is: a front-proxy CA and client certificate the aggregator proxies with, the
// requestheader flags it publishes in kube-system/extension-apiserver-authentication,
// and routing to an APIService's endpoints (so that a Service with an
// EndpointSlice to 127.0.0.1 reaches a server the test runs).
func WithAggregation() Option {
	return func(o *options) { o.aggregation = true }
}

// configureAggregation writes the front proxy's CA and client certificate into a
// folder of its own and sets the API server's flags; the folder is removed by Stop.
func (e *Env) configureAggregation() error {
	dir, err := os.MkdirTemp("", "testenv-front-proxy-")
	if err != nil {
		return err
	}
	e.frontProxyDir = dir
	caKey, caCert, caPEM, err := newCert(nil, nil, pkix.Name{CommonName: "front-proxy-ca"}, true)
	if err != nil {
		return err
	}
	clientKey, _, clientPEM, err := newCert(caCert, caKey, pkix.Name{CommonName: FrontProxyName}, false)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":     caPEM,
		"client.crt": clientPEM,
		"client.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	args := e.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", filepath.Join(dir, "ca.crt"))
	args.Set("requestheader-allowed-names", FrontProxyName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", filepath.Join(dir, "client.crt"))
	args.Set("proxy-client-key-file", filepath.Join(dir, "client.key"))
	args.Set("enable-aggregator-routing", "true")
	return nil
}

// newCert makes a key and a certificate for subject, signed by parent (self-signed
// when parent is nil): a CA, or a client certificate.
func newCert(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, subject pkix.Name, isCA bool) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
