package mcpserver

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// The cluster's own service-account tokens are told from junk without asking the
// API server: they are JWTs that its issuer signed, and the issuer's public keys are
// published by the API server's OIDC discovery (readable by every service account,
// the manager's included, through the default ClusterRoleBinding
// system:service-account-issuer-discovery). A token that passes this check is
// reviewed without spending the budget of new tokens: only the API server can
// mint one (each a TokenRequest of someone with credentials), so a flood of them
// costs the API server no more than it already paid. The check only spares the
// budget; the TokenReview still decides who the caller is, so a token of a deleted
// service account or for another audience is refused as before.

const (
	// discoveryPath and keysPath are the API server's OIDC discovery document and
	// its key set (the document's jwks_uri names the issuer's external address,
	// which the manager may not reach; the API server serves the same keys here).
	discoveryPath = "/.well-known/openid-configuration"
	keysPath      = "/openid/v1/jwks"
	// keysTTL is how long the keys read are used before they are read again;
	// keysRetry is how soon they are read again for a token that names a key
	// not among them (a key rotated in), or after a failed read.
	keysTTL, keysRetry = 10 * time.Minute, 10 * time.Second
	// keysTimeout bounds one read of the discovery document and keys.
	keysTimeout = 5 * time.Second
	// clockLeeway is how far the manager's clock may be from the API server's when
	// a token's exp and nbf are checked (the API server allows the same).
	clockLeeway = time.Minute
)

// issuerKeys is the cluster's service-account issuer and its public keys, by key
// id, read from the API server with the manager's own identity.
type issuerKeys struct {
	issuer string
	keys   map[string]crypto.PublicKey
}

// clusterIssuer reads the issuer's keys when they are first needed, again after
// keysTTL, and again (at most every keysRetry) when a token of the issuer names a
// key not among them.
type clusterIssuer struct {
	// discovery reads the API server's non-resource paths as the manager; nil
	// checks no token, so that every new token goes by its source's budget.
	discovery rest.Interface
	log       logr.Logger

	mu     sync.Mutex
	keys   issuerKeys
	read   time.Time
	failed bool
}

// signed reports whether token is a JWT that the cluster's issuer signed and that
// is valid now.
func (c *clusterIssuer) signed(ctx context.Context, token string, now time.Time) bool {
	if c == nil || c.discovery == nil {
		return false
	}
	jwt, ok := parseJWT(token)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := c.read.IsZero() || now.Sub(c.read) > keysTTL || (c.failed && now.Sub(c.read) > keysRetry)
	unknownKey := jwt.claims.Issuer == c.keys.issuer && c.keys.keys[jwt.header.KeyID] == nil && now.Sub(c.read) > keysRetry
	if stale || unknownKey {
		c.refresh(ctx, now)
	}
	return jwt.verify(c.keys, now)
}

// refresh reads the issuer and its keys; on failure it keeps the keys it had.
// Called with mu held, which makes the reads one at a time.
func (c *clusterIssuer) refresh(ctx context.Context, now time.Time) {
	c.read = now
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keysTimeout)
	defer cancel()
	keys, err := c.fetch(ctx)
	if err != nil {
		if !c.failed {
			c.log.Error(err, "reading the cluster's service-account issuer keys; until they can be read, new tokens are reviewed within their source address's budget only")
		}
		c.failed = true
		return
	}
	if c.failed {
		c.log.Info("read the cluster's service-account issuer keys again", "issuer", keys.issuer)
	}
	c.keys, c.failed = keys, false
}

func (c *clusterIssuer) fetch(ctx context.Context) (issuerKeys, error) {
	doc, err := c.discovery.Get().AbsPath(discoveryPath).Do(ctx).Raw()
	if err != nil {
		return issuerKeys{}, fmt.Errorf("GET %s: %w", discoveryPath, err)
	}
	var discovery struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(doc, &discovery); err != nil || discovery.Issuer == "" {
		return issuerKeys{}, fmt.Errorf("GET %s: no issuer in %q (%v)", discoveryPath, doc, err)
	}
	set, err := c.discovery.Get().AbsPath(keysPath).Do(ctx).Raw()
	if err != nil {
		return issuerKeys{}, fmt.Errorf("GET %s: %w", keysPath, err)
	}
	keys, err := parseKeySet(set)
	if err != nil {
		return issuerKeys{}, fmt.Errorf("GET %s: %w", keysPath, err)
	}
	return issuerKeys{issuer: discovery.Issuer, keys: keys}, nil
}

// parseKeySet reads a JSON Web Key Set's RSA and EC public keys by key id. A key
// of another type is skipped: tokens signed with it are not recognized, which
// only means they go by their source's budget.
func parseKeySet(data []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if k.Kid == "" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, errN := base64.RawURLEncoding.DecodeString(k.N)
			e, errE := base64.RawURLEncoding.DecodeString(k.E)
			if errN != nil || errE != nil || len(e) == 0 || len(e) > 4 {
				continue
			}
			keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			curve := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}[k.Crv]
			x, errX := base64.RawURLEncoding.DecodeString(k.X)
			y, errY := base64.RawURLEncoding.DecodeString(k.Y)
			if curve == nil || errX != nil || errY != nil {
				continue
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
			if err != nil {
				continue
			}
			keys[k.Kid] = pub
		}
	}
	return keys, nil
}

// jwt is a compact JWS whose header and claims were decoded, not yet verified.
type jwt struct {
	header struct {
		Alg   string `json:"alg"`
		KeyID string `json:"kid"`
	}
	claims struct {
		Issuer    string `json:"iss"`
		Expiry    *int64 `json:"exp"`
		NotBefore *int64 `json:"nbf"`
	}
	signingInput, signature []byte
}

// maxJWT bounds the tokens decoded as JWTs (a service-account token is about
// a kilobyte).
const maxJWT = 16 << 10

func parseJWT(token string) (*jwt, bool) {
	if len(token) > maxJWT {
		return nil, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, false
	}
	t := &jwt{signingInput: []byte(parts[0] + "." + parts[1])}
	header, errH := base64.RawURLEncoding.DecodeString(parts[0])
	claims, errC := base64.RawURLEncoding.DecodeString(parts[1])
	sig, errS := base64.RawURLEncoding.DecodeString(parts[2])
	if errors.Join(errH, errC, errS) != nil {
		return nil, false
	}
	if json.Unmarshal(header, &t.header) != nil || json.Unmarshal(claims, &t.claims) != nil {
		return nil, false
	}
	t.signature = sig
	return t, true
}

// verify reports whether the token's issuer is keys', one of keys signed it, and
// it is valid at now. Only what Kubernetes signs service-account tokens with is
// recognized: RS256 and ES256/384/512.
func (t *jwt) verify(keys issuerKeys, now time.Time) bool {
	if keys.issuer == "" || t.claims.Issuer != keys.issuer || t.claims.Expiry == nil {
		return false
	}
	if now.After(time.Unix(*t.claims.Expiry, 0).Add(clockLeeway)) {
		return false
	}
	if t.claims.NotBefore != nil && now.Before(time.Unix(*t.claims.NotBefore, 0).Add(-clockLeeway)) {
		return false
	}
	switch key := keys.keys[t.header.KeyID].(type) {
	case *rsa.PublicKey:
		if t.header.Alg != "RS256" {
			return false
		}
		digest := sha256.Sum256(t.signingInput)
		return rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], t.signature) == nil
	case *ecdsa.PublicKey:
		var digest []byte
		switch {
		case t.header.Alg == "ES256" && key.Curve == elliptic.P256():
			d := sha256.Sum256(t.signingInput)
			digest = d[:]
		case t.header.Alg == "ES384" && key.Curve == elliptic.P384():
			d := sha512.Sum384(t.signingInput)
			digest = d[:]
		case t.header.Alg == "ES512" && key.Curve == elliptic.P521():
			d := sha512.Sum512(t.signingInput)
			digest = d[:]
		default:
			return false
		}
		// A JWS ECDSA signature is r and s, each the curve's size, big-endian.
		size := (key.Curve.Params().BitSize + 7) / 8
		if len(t.signature) != 2*size {
			return false
		}
		r := new(big.Int).SetBytes(t.signature[:size])
		s := new(big.Int).SetBytes(t.signature[size:])
		return ecdsa.Verify(key, digest, r, s)
	}
	return false
}
