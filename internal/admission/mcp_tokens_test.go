package admission

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/toolgate/toolgate/internal/mcpserver"
)

// from is an HTTP client whose connections come from the loopback address ip, so
// that the endpoint sees requests of two sources on one machine.
func from(t *testing.T, ip string) *http.Client {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	transport := &http.Transport{DialContext: dialer.DialContext}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: time.Minute}
}

// initializeWith sends an MCP initialize with token and returns the answer.
func initializeWith(ctx context.Context, hc *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(rawInitialize))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b), nil
}

// forge re-signs a real token's header and claims with a key of its own: a JWT
// that names the cluster's issuer and key id but that the cluster never signed.
func forge(t *testing.T, real string, n int) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(real, ".")
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("the service-account token is not a JWT: %v", err)
	}
	claims = []byte(strings.Replace(string(claims), `"sub":"`, fmt.Sprintf(`"sub":"forged-%d-`, n), 1))
	input := parts[0] + "." + base64.RawURLEncoding.EncodeToString(claims)
	digest := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// A client flooding the endpoint with new junk tokens cannot lock anyone else out:
// a new token of the cluster's own (a service account's, as the kubelet rotates
// an in-cluster agent's) is reviewed whatever the flood, even from the flooding
// address, because the cluster's issuer signed it; a new token that is not the
// cluster's is reviewed within its source address's own budget, which the flood
// from another address did not spend. A JWT that names the cluster's issuer but
// that the cluster did not sign is junk like any other.
func TestMCPJunkTokenFloodLocksNoNewTokenOut(t *testing.T) {
	e := startMCP(t)
	ctx := t.Context()
	reviewer, err := kubernetes.NewForConfig(configs[controllerUser])
	if err != nil {
		t.Fatal(err)
	}
	reviews := &countingReviews{TokenReviewInterface: reviewer.AuthenticationV1().TokenReviews()}
	// One new token every ten seconds past the burst: the flood alone would keep
	// the endpoint's budget empty for the whole test.
	const reviewRate = 0.1
	s := &mcpserver.Server{Config: env.Config, Reviews: reviews, Discovery: reviewer.Discovery().RESTClient(), Scheme: env.Scheme, ReviewRate: reviewRate}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	url := srv.URL + "/mcp/" + e.ns + "/fix-tests"
	flooder, other := from(t, "127.0.0.1"), from(t, "127.0.0.2")

	var mu sync.Mutex
	limited, junk := 0, 0
	send := func(hc *http.Client, token string) (int, string) {
		status, body, err := initializeWith(ctx, hc, url, token)
		if err != nil {
			return 0, err.Error()
		}
		mu.Lock()
		defer mu.Unlock()
		junk++
		if status == http.StatusTooManyRequests {
			limited++
		}
		return status, body
	}
	start := time.Now()
	for i := range 80 {
		if status, body := send(flooder, fmt.Sprintf("junk-%d", i)); status != http.StatusUnauthorized && status != http.StatusTooManyRequests {
			t.Fatalf("junk token %d: %d %s; want 401 or 429", i, status, body)
		}
	}
	// The flood goes on while the others come in.
	floodCtx, stop := context.WithCancel(ctx)
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		for i := 0; floodCtx.Err() == nil && i < 2000; i++ {
			_, _, _ = initializeWith(floodCtx, flooder, url, fmt.Sprintf("more-junk-%d", i))
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { stop(); <-flooding })

	// Forged JWTs of the cluster's issuer, from the flooding address: limited like
	// any junk once that address spent its budget.
	for i := range 3 {
		if status, body := send(flooder, forge(t, e.agentToken, i)); status != http.StatusTooManyRequests || !strings.Contains(body, "too many new tokens") {
			t.Fatalf("forged JWT %d from the flooding address: %d %s; want 429, as any junk", i, status, body)
		}
	}
	mu.Lock()
	if limited == 0 {
		t.Fatalf("%d junk tokens from one address, none limited", junk)
	}
	mu.Unlock()

	// A new token of the task's proposer (as the kubelet rotates an in-cluster
	// agent's), from the flooding address itself: the MCP client connects.
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, "coding-agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "rotated-agent", Version: "1"}, nil)
	session, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{tr.Status.Token, flooder.Transport}}}, nil)
	if err != nil {
		t.Fatalf("a new token of the task's proposer during a junk flood from its own address: %v; want it connected", err)
	}
	t.Cleanup(func() { _ = session.Close() })
	if _, err := session.ListTools(ctx, nil); err != nil {
		t.Fatalf("listing tools with the new token: %v", err)
	}

	// A new token that is not the cluster's, from another address: reviewed (and
	// refused as not valid), not limited.
	if status, body := send(other, "another-clients-token"); status != http.StatusUnauthorized || !strings.Contains(body, "not valid for this cluster") {
		t.Fatalf("a new token from another address during the flood: %d %s; want it reviewed (401 not valid), not limited", status, body)
	}

	// The flooding address cost the API server its own share only: its burst (a
	// fifth of the endpoint's 50) and its rate, beside the two tokens above.
	stop()
	<-flooding
	if n, bound := reviews.count(), 2+50/5+int(reviewRate/4*time.Since(start).Seconds())+1; n > bound {
		t.Fatalf("%d TokenReviews; want at most %d (the flooding address's burst and rate, the proposer's and the other address's token)", n, bound)
	}
}
