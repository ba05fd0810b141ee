package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolgate/toolgate/internal/version"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update

// serviceAccountNamespaceFile holds the pod's namespace in every pod that mounts its
// service account's token.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Bounds of the wait between two failed attempts to publish the version.
const (
	publishRetryFirst = time.Second
	publishRetryMax   = 5 * time.Minute
)

// versionPublisher writes the manager's version into the ConfigMap internal/version
// names, in the manager's own namespace, for `kubectl toolgate version`. A ConfigMap
// because it is the plain Kubernetes object for a few words of data, which kubectl
// shows and RBAC can open to readers one name at a time; the Deployment's labels
// would say what the manifest asked for, not which binary runs.
type versionPublisher struct {
	// reader is uncached: the manager's cache holds no ConfigMaps of its namespace.
	reader    client.Reader
	writer    client.Writer
	namespace string
	version   string
}

// NeedLeaderElection is true so that, during a rollout, the ConfigMap names the
// build that reconciles, not the replica that started last.
func (versionPublisher) NeedLeaderElection() bool { return true }

// Start publishes, retrying with a growing wait until it succeeds or the manager
// stops: the version is for people, so a failure is logged and never stops the
// manager.
func (p versionPublisher) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("version")
	wait := publishRetryFirst
	for {
		err := p.publish(ctx)
		if err == nil {
			log.Info("published the version", "version", p.version, "configMap", p.namespace+"/"+version.ConfigMapName)
			return nil
		}
		log.Error(err, "publishing the version for kubectl toolgate version", "retryIn", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, publishRetryMax)
	}
}

func (p versionPublisher) publish(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	err := p.reader.Get(ctx, types.NamespacedName{Namespace: p.namespace, Name: version.ConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: version.ConfigMapName, Labels: map[string]string{"app.kubernetes.io/name": "toolgate"}},
			Data:       map[string]string{version.ConfigMapKey: p.version},
		}
		return p.writer.Create(ctx, cm)
	}
	if err != nil {
		return err
	}
	if cm.Data[version.ConfigMapKey] == p.version {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[version.ConfigMapKey] = p.version
	return p.writer.Update(ctx, cm)
}

// ownNamespace is the namespace the manager runs in: POD_NAMESPACE (config/manager
// sets it from the downward API), else the service account's. Empty outside a
// cluster (make run) when POD_NAMESPACE is not set.
func ownNamespace() (string, error) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	data, err := os.ReadFile(serviceAccountNamespaceFile)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the manager's namespace: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}
