package mcpserver

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"
)

const testIssuer = "https://kubernetes.default.svc"

var b64 = base64.RawURLEncoding

// signJWT builds a compact JWS of header and claims, signed with key by alg
// (RS256, ES256, or HS256 with secret as the HMAC key).
func signJWT(t *testing.T, alg, kid string, claims map[string]any, key crypto.Signer, secret []byte) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": alg, "kid": kid})
	c, _ := json.Marshal(claims)
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	digest := sha256.Sum256([]byte(input))
	var sig []byte
	switch alg {
	case "RS256":
		s, err := rsa.SignPKCS1v15(rand.Reader, key.(*rsa.PrivateKey), crypto.SHA256, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = s
	case "ES256":
		r, s, err := ecdsa.Sign(rand.Reader, key.(*ecdsa.PrivateKey), digest[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	case "HS256":
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(input))
		sig = m.Sum(nil)
	case "none":
	}
	return input + "." + b64.EncodeToString(sig)
}

// keySet is the JWKS the API server would publish for the keys.
func keySet(rsaKey *rsa.PublicKey, ecKey *ecdsa.PublicKey) []byte {
	ecBytes, _ := ecKey.Bytes()
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig", "n": b64.EncodeToString(rsaKey.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "EC", "kid": "ec-1", "alg": "ES256", "use": "sig", "crv": "P-256", "x": b64.EncodeToString(ecBytes[1:33]), "y": b64.EncodeToString(ecBytes[33:])},
		{"kty": "OKP", "kid": "ed-1", "crv": "Ed25519", "x": "AAAA"},
	}}
	data, _ := json.Marshal(set)
	return data
}

// Only a JWT of the cluster's issuer, signed by one of its published keys and
// valid now, is recognized: forgeries, other issuers, expired tokens and
// algorithm tricks are not (they go by their source's budget).
func TestJWTVerify(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	published, err := parseKeySet(keySet(&rsaKey.PublicKey, &ecKey.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if len(published) != 2 {
		t.Fatalf("parsed %d keys of an RSA, an EC and an Ed25519 key; want the RSA and EC ones", len(published))
	}
	keys := issuerKeys{issuer: testIssuer, keys: published}
	now := time.Unix(1_800_000_000, 0)
	valid := func() map[string]any {
		return map[string]any{"iss": testIssuer, "sub": "system:serviceaccount:ns:sa", "iat": now.Unix() - 10, "nbf": now.Unix() - 10, "exp": now.Unix() + 3600}
	}
	with := func(k string, v any) map[string]any {
		c := valid()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	rsaToken := signJWT(t, "RS256", "rsa-1", valid(), rsaKey, nil)
	parts := strings.Split(rsaToken, ".")
	for _, tc := range []struct {
		name  string
		token string
		want  bool
	}{
		{"RS256 by the issuer's key", rsaToken, true},
		{"ES256 by the issuer's key", signJWT(t, "ES256", "ec-1", valid(), ecKey, nil), true},
		{"expired within the clock leeway", signJWT(t, "RS256", "rsa-1", with("exp", now.Unix()-30), rsaKey, nil), true},
		{"expired", signJWT(t, "RS256", "rsa-1", with("exp", now.Unix()-3600), rsaKey, nil), false},
		{"not valid yet", signJWT(t, "RS256", "rsa-1", with("nbf", now.Unix()+3600), rsaKey, nil), false},
		{"without exp", signJWT(t, "RS256", "rsa-1", with("exp", nil), rsaKey, nil), false},
		{"another issuer", signJWT(t, "RS256", "rsa-1", with("iss", "https://dex.example"), rsaKey, nil), false},
		{"another key under the issuer's key id", signJWT(t, "RS256", "rsa-1", valid(), otherKey, nil), false},
		{"a key id not published", signJWT(t, "RS256", "rsa-2", valid(), rsaKey, nil), false},
		{"claims changed after signing", parts[0] + "." + b64.EncodeToString([]byte(`{"iss":"`+testIssuer+`","exp":9999999999}`)) + "." + parts[2], false},
		{"alg none", signJWT(t, "none", "rsa-1", valid(), nil, nil), false},
		{"HS256 keyed with the public key", signJWT(t, "HS256", "rsa-1", valid(), nil, rsaKey.N.Bytes()), false},
		{"RS256 header on the EC key", signJWT(t, "RS256", "ec-1", valid(), rsaKey, nil), false},
		{"not a JWT", "junk-token", false},
		{"four parts", rsaToken + ".x", false},
		{"too long", rsaToken + strings.Repeat("A", maxJWT), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jwt, ok := parseJWT(tc.token)
			if got := ok && jwt.verify(keys, now); got != tc.want {
				t.Fatalf("verified %v; want %v", got, tc.want)
			}
		})
	}
	if jwt, ok := parseJWT(rsaToken); !ok || jwt.verify(issuerKeys{}, now) {
		t.Fatal("a token was verified with no keys read")
	}
}
