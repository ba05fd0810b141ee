// Package apitest serves the archive's API (archiveapi/server) to an envtest
// kube-apiserver started with testenv.WithAggregation, as the cluster does: the
// server listens on one of the machine's addresses, a selector-less Service with
// an EndpointSlice points at it, and an APIService with the server's CA bundle
// registers it. The address is not 127.0.0.1: an EndpointSlice may not point at
// loopback, and the aggregator routes to endpoints only.
package apitest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/archiveapi"
	"github.com/toolgate/toolgate/internal/archiveapi/server"
	"github.com/toolgate/toolgate/internal/testenv"
)

// Where the API is registered: config/archive-api's APIService and Service, as
// config/default names them.
const (
	Namespace   = "toolgate-system"
	ServiceName = "toolgate-archive-api"
	// APIServiceName is v1alpha1.archive.toolgate.dev.
	APIServiceName = archiveapi.Version + "." + archiveapi.Group
)

// Serve starts the API over reader and registers it with env's API server; it
// returns when the aggregator reports the APIService available. stop ends the
// server and waits for it.
func Serve(ctx context.Context, env *testenv.Env, reader server.Reader) (srv *server.Server, stop func() error, err error) {
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, nil, err
	}
	ip, err := HostIP()
	if err != nil {
		return nil, nil, err
	}
	srv, err = server.New(ctx, server.Options{
		Addr: net.JoinHostPort(ip, "0"), Kube: kube, Archive: reader,
		DNSNames: []string{ServiceName + "." + Namespace + ".svc"},
	})
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	stop = func() error { cancel(); return <-done }
	if err := Register(ctx, env.Client, srv.Addr(), srv.CABundle); err != nil {
		return nil, nil, fmt.Errorf("%w (stopping: %v)", err, stop())
	}
	return srv, stop, nil
}

// Register points the APIService, through a selector-less Service and an
// EndpointSlice, at addr (an address of HostIP), with caBundle (none: whoever
// serves writes it, as the controller does), and waits until it is available.
func Register(ctx context.Context, c client.Client, addr string, caBundle []byte) error {
	ip, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(portText)
	registration, err := apiService(caBundle)
	if err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(port)}}},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: ServiceName}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		},
		registration,
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	return waitAvailable(ctx, c)
}

// apiService is the APIService of config/archive-api, as config/default names its
// Service, with caBundle when one is given.
func apiService(caBundle []byte) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "archive-api", "apiservice.yaml"))
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		return nil, fmt.Errorf("config/archive-api/apiservice.yaml: %w", err)
	}
	if u.GetName() != APIServiceName {
		return nil, fmt.Errorf("config/archive-api/apiservice.yaml names %s, not %s", u.GetName(), APIServiceName)
	}
	// config/default's namePrefix and namespace, which kustomize applies.
	if err := unstructured.SetNestedMap(u.Object, map[string]any{"name": ServiceName, "namespace": Namespace, "port": int64(443)}, "spec", "service"); err != nil {
		return nil, err
	}
	if caBundle != nil {
		if err := unstructured.SetNestedField(u.Object, base64.StdEncoding.EncodeToString(caBundle), "spec", "caBundle"); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// waitAvailable waits for the aggregator to call the APIService Available: it
// reached the server through the Service and verified its certificate.
func waitAvailable(ctx context.Context, c client.Client) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiregistration.k8s.io/v1")
		u.SetKind("APIService")
		if err := c.Get(ctx, client.ObjectKey{Name: APIServiceName}, u); err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, raw := range conditions {
			cond, _ := raw.(map[string]any)
			if cond["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", cond["reason"], cond["message"])
				return cond["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s never became available (last: %s): %w", APIServiceName, last, err)
	}
	return nil
}

// HostIP is an IPv4 address of the machine that is not loopback or link-local.
func HostIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("the archive API's tests need an IPv4 address that is not loopback (an EndpointSlice may not point at 127.0.0.1); this machine has none")
}
