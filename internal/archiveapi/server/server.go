// Package server serves archive.toolgate.dev/v1alpha1 (package archiveapi) from the
// controller's process: an aggregated API the kube-apiserver proxies to, read-only.
//
// It is a small handler behind k8s.io/apiserver's own filters rather than a
// generic API server: four reads and discovery need no storage, watch, admission,
// OpenAPI or priority and fairness, each of which a generic server would start
// and need RBAC for. What must not be hand-written is not: the front proxy's
// client certificate is verified by apiserver's request-header authenticator
// against the requestheader CA of kube-system/extension-apiserver-authentication
// (followed as it changes), and every request is authorized by a
// SubjectAccessReview of its RequestInfo (verb get or list, resource calls or
// tasks, subresource verify, in the path's namespace), as metrics-server does.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap the kube-apiserver publishes its front proxy's CA and headers in.
const (
	authConfigMapNamespace = metav1.NamespaceSystem
	authConfigMapName      = "extension-apiserver-authentication"
)

// Options configure a Server.
type Options struct {
	// Addr is where to listen, host:port (":0" picks a port; Server.Addr says which).
	Addr string
	// Kube reaches the kube-apiserver: the front proxy's CA and headers, and
	// SubjectAccessReviews.
	Kube kubernetes.Interface
	// Archive is read.
	Archive Reader
	// Cert is the serving certificate; nil: a self-signed one for DNSNames.
	Cert *tls.Certificate
	// DNSNames are the names a self-signed certificate is for: the Service's
	// NAME.NAMESPACE.svc, the name the aggregator verifies.
	DNSNames []string
}

// Server is the API, listening.
type Server struct {
	http     *http.Server
	listener net.Listener
	// CABundle verifies the serving certificate: the APIService's caBundle.
	CABundle []byte
	runners  []func(context.Context)
}

// New builds the server and listens; Run serves. It reads the front proxy's
// configuration once here, so that a cluster without it (no aggregation layer)
// is an error at start, not a 401 on every request.
func New(ctx context.Context, o Options) (*Server, error) {
	authn, headerConfig, runners, err := authentication(ctx, o.Kube)
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: o.Kube.AuthorizationV1(),
		// A grant is believed for 10 s, a refusal for 5 s: a role binding just
		// made is seen soon, and a burst of reads asks the API server once.
		AllowCacheTTL:       10 * time.Second,
		DenyCacheTTL:        5 * time.Second,
		WebhookRetryBackoff: &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
	}.New()
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(statusScheme()).WithoutConversion()
	var h http.Handler = handler{archive: o.Archive}
	h = genericfilters.WithAuthorization(h, authz, codecs)
	h = genericfilters.WithAuthentication(h, authn, genericfilters.Unauthorized(codecs), nil, headerConfig)
	h = genericfilters.WithRequestInfo(h, &request.RequestInfoFactory{APIPrefixes: sets.NewString("apis"), GrouplessAPIPrefixes: sets.NewString("api")})

	cert, bundle := o.Cert, []byte(nil)
	if cert == nil {
		if cert, bundle, err = selfSigned(o.DNSNames); err != nil {
			return nil, err
		}
	}
	listener, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("archive API: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// A read is one indexed query, a verify one walk of a chain: a request
		// that takes longer than this is cut rather than held open.
		WriteTimeout: 2 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		// The client certificate is asked for, not checked here: it is the
		// request-header authenticator that verifies it against the front proxy's
		// CA (which changes without a restart) and its allowed names.
		// HTTP/2 is not offered, as on the controller's metrics endpoint: it is
		// exposed to the Rapid Reset and Stream Cancellation attacks.
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
	}
	return &Server{http: srv, listener: listener, CABundle: bundle, runners: runners}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Run serves until ctx ends, following changes of the front proxy's CA and
// headers, then shuts down.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	for _, run := range s.runners {
		go func() { run(ctx); done <- struct{}{} }()
	}
	defer func() {
		for range s.runners {
			<-done
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- s.http.ServeTLS(s.listener, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("archive API: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShutdown()
	err := s.http.Shutdown(shutdown)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// authentication is the front proxy's authenticator: its client certificate
// verified against the requestheader CA, its name against the allowed names, the
// user from its headers. A request with no proxy certificate is anonymous, and
// the authorizer decides what anonymous may read (nothing, in RBAC's default):
// the aggregator's availability check is such a request, and takes a 403 as
// "available". A proxy certificate that does not verify is refused (401), never
// taken as anonymous.
func authentication(ctx context.Context, kube kubernetes.Interface) (authn authenticator.Request, cfg *authenticatorfactory.RequestHeaderConfig, runners []func(context.Context), err error) {
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("requestheader-client-ca", authConfigMapNamespace, authConfigMapName, "requestheader-client-ca-file", kube)
	if err != nil {
		return nil, nil, nil, err
	}
	headers := headerrequest.NewRequestHeaderAuthRequestController(authConfigMapName, authConfigMapNamespace, kube,
		"requestheader-username-headers", "requestheader-uid-headers", "requestheader-group-headers", "requestheader-extra-headers-prefix", "requestheader-allowed-names")
	if err := errors.Join(ca.RunOnce(ctx), headers.RunOnce(ctx)); err != nil {
		return nil, nil, nil, fmt.Errorf("reading the front proxy's configuration from %s/%s (is the API server's aggregation layer configured?): %w", authConfigMapNamespace, authConfigMapName, err)
	}
	cfg = &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:   ca,
		UsernameHeaders:     headerrequest.StringSliceProviderFunc(headers.UsernameHeaders),
		UIDHeaders:          headerrequest.StringSliceProviderFunc(headers.UIDHeaders),
		GroupHeaders:        headerrequest.StringSliceProviderFunc(headers.GroupHeaders),
		ExtraHeaderPrefixes: headerrequest.StringSliceProviderFunc(headers.ExtraHeaderPrefixes),
		AllowedClientNames:  headerrequest.StringSliceProviderFunc(headers.AllowedClientNames),
	}
	a, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:           &apiserverconfig.AnonymousAuthConfig{Enabled: true},
		RequestHeaderConfig: cfg,
	}.New()
	if err != nil {
		return nil, nil, nil, err
	}
	runners = []func(context.Context){
		func(ctx context.Context) { ca.Run(ctx, 1) },
		func(ctx context.Context) { headers.Run(ctx, 1) },
	}
	return a, cfg, runners, nil
}

// statusScheme knows metav1.Status, which the filters write their refusals as.
func statusScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	return s
}
