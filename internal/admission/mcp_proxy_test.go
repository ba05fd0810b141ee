package admission

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/toolgate/toolgate/internal/mcpserver"
)

// apiProxy stands between an MCP endpoint and the API server, where the endpoint
// talks as its callers, so that a test sees the endpoint's requests and can act
// at a given moment of one: it counts the watches open, and calls onResponse with
// each answer before the endpoint gets it.
type apiProxy struct {
	url        string
	mu         sync.Mutex
	watching   map[string]int // open watches, by resource
	onResponse func(*http.Response)
}

func newAPIProxy(t *testing.T) *apiProxy {
	t.Helper()
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(rest.AnonymousClientConfig(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{watching: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(api)
	proxy.Transport = transport
	proxy.ModifyResponse = func(resp *http.Response) error {
		p.mu.Lock()
		on := p.onResponse
		p.mu.Unlock()
		if on != nil {
			on(resp)
		}
		return nil
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			resource := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
			p.mu.Lock()
			p.watching[resource]++
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				p.watching[resource]--
				p.mu.Unlock()
			}()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	p.url = front.URL
	return p
}

// watches is how many watches of resource (its plural name) are open.
func (p *apiProxy) watches(resource string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watching[resource]
}

// answered sets what the proxy does with each answer before the endpoint gets it.
func (p *apiProxy) answered(on func(*http.Response)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onResponse = on
}

// endpointBehind serves an MCP endpoint that talks to the API server through the
// proxy, and returns the URL of task's endpoint.
func (p *apiProxy) endpointBehind(t *testing.T, ns, task string) string {
	t.Helper()
	reviewer, err := kubernetes.NewForConfig(configs[controllerUser])
	if err != nil {
		t.Fatal(err)
	}
	s := &mcpserver.Server{Config: &rest.Config{Host: p.url}, Reviews: reviewer.AuthenticationV1().TokenReviews(), Scheme: env.Scheme, MaxWait: time.Minute, Heartbeat: time.Second}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp/" + ns + "/" + task
}
