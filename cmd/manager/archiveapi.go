package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/archiveapi"
	"github.com/toolgate/toolgate/internal/archiveapi/server"
)

// archiveAPIConfig is what the --archive-api-* flags set: the archive's aggregated
// API (archive.toolgate.dev, docs/archive.md), served from this process.
type archiveAPIConfig struct {
	addr, certDir, service string
}

func addArchiveAPIFlags(fs *flag.FlagSet, c *archiveAPIConfig) {
	fs.StringVar(&c.addr, "archive-api-bind-address", "0", "Address the archive's read-only aggregated API (archive.toolgate.dev/v1alpha1) binds to, over TLS; 0 (the default) disables it. Needs --archive-dsn-file, and the APIService and RBAC of config/archive-api.")
	fs.StringVar(&c.certDir, "archive-api-cert-dir", "", "Folder holding tls.crt and tls.key, the archive API's serving certificate; the APIService's caBundle is then yours to set. Empty: a self-signed certificate is made at start and its CA written into the APIService.")
	fs.StringVar(&c.service, "archive-api-service", "toolgate-archive-api.toolgate-system", "The archive API's Service, NAME.NAMESPACE: the name a self-signed certificate is made for, which the aggregator verifies.")
}

// check refuses an API without an archive to read.
func (c archiveAPIConfig) check(a *archive.Archive) error {
	if c.addr != "0" && a == nil {
		return errors.New("--archive-api-bind-address needs --archive-dsn-file: the API serves the archive")
	}
	return nil
}

// archiveAPIRunnable serves the API on every replica (reads need no leader).
type archiveAPIRunnable struct {
	config  archiveAPIConfig
	rest    *rest.Config
	client  client.Client
	archive *archive.Archive
}

func (r archiveAPIRunnable) NeedLeaderElection() bool { return false }

func (r archiveAPIRunnable) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("archive-api")
	kube, err := kubernetes.NewForConfig(r.rest)
	if err != nil {
		return err
	}
	opts := server.Options{Addr: r.config.addr, Kube: kube, Archive: r.archive, DNSNames: []string{r.config.service + ".svc", r.config.service + ".svc.cluster.local"}}
	if r.config.certDir != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(r.config.certDir, "tls.crt"), filepath.Join(r.config.certDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("--archive-api-cert-dir: %w", err)
		}
		opts.Cert = &cert
	}
	srv, err := server.New(ctx, opts)
	if err != nil {
		return err
	}
	if srv.CABundle != nil {
		go keepCABundle(ctx, r.client, srv.CABundle)
	}
	log.Info("serving the archive's API", "address", srv.Addr())
	return srv.Run(ctx)
}

// keepCABundle writes the CA into the APIService, trying again until it is
// written (the APIService may be created after the controller starts: both come
// from one kubectl apply), and writes it again whenever the APIService has none
// (a re-apply of the manifest, which carries none). It never replaces another
// replica's bundle, so two replicas do not take turns.
func keepCABundle(ctx context.Context, c client.Client, bundle []byte) {
	log := ctrl.Log.WithName("archive-api")
	written, failures := false, 0
	_ = wait.PollUntilContextCancel(ctx, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		has, err := apiServiceHasCABundle(ctx, c)
		if err == nil && (!has || !written) {
			err = publishCABundle(ctx, c, bundle)
			written = written || err == nil
		}
		if err != nil {
			// Said once in a while, not every 10 s.
			if failures%30 == 0 {
				log.Error(err, "writing the serving certificate's CA into the APIService; until it is, the aggregator does not trust this server")
			}
			failures++
		}
		return false, nil
	})
}

func apiServiceHasCABundle(ctx context.Context, c client.Client) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	if err := c.Get(ctx, client.ObjectKey{Name: apiServiceName}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("APIService %s does not exist: apply config/archive-api", apiServiceName)
		}
		return false, err
	}
	bundle, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
	return bundle != "", nil
}

const apiServiceName = archiveapi.Version + "." + archiveapi.Group

// publishCABundle writes the self-signed certificate's CA into the API's own
// APIService, the one object RBAC lets the controller patch (resourceNames).
func publishCABundle(ctx context.Context, c client.Client, bundle []byte) error {
	apiService := &unstructured.Unstructured{}
	apiService.SetAPIVersion("apiregistration.k8s.io/v1")
	apiService.SetKind("APIService")
	apiService.SetName(apiServiceName)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": base64.StdEncoding.EncodeToString(bundle)}})
	if err != nil {
		return err
	}
	err = c.Patch(ctx, apiService, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("APIService %s does not exist: apply config/archive-api", apiService.GetName())
	}
	return err
}

// addArchiveAPI adds the API to the manager when its flag is set.
func addArchiveAPI(mgr manager.Manager, c archiveAPIConfig, a *archive.Archive) error {
	if c.addr == "0" {
		return nil
	}
	if _, err := os.Stat(c.certDir); c.certDir != "" && err != nil {
		return fmt.Errorf("--archive-api-cert-dir: %w", err)
	}
	return mgr.Add(archiveAPIRunnable{config: c, rest: mgr.GetConfig(), client: mgr.GetClient(), archive: a})
}
