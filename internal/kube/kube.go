// Package kube holds the controller's few rules for talking to the API server that
// every reconciler shares: how to read an object the cache may not have seen yet,
// which reader gives the newest state, and how to delete exactly the object that was
// looked at.
package kube

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GetFresh reads obj from cached and confirms a NotFound with api (when there is
// one), because the cache may not have seen an object created a moment ago.
func GetFresh(ctx context.Context, cached, api client.Reader, key client.ObjectKey, obj client.Object) error {
	err := cached.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && api != nil {
		return api.Get(ctx, key, obj)
	}
	return err
}

// Latest is the reader whose answer is the API server's current state: api when
// there is one (a controller's reconcilers always have one; a test may leave it out),
// else cached.
func Latest(cached, api client.Reader) client.Reader {
	if api != nil {
		return api
	}
	return cached
}

// DeleteByUID deletes obj only while it is the object of obj's UID: a new object
// that took the name meanwhile is not touched. One already gone, or replaced, is no
// error: either way the object looked at no longer exists.
func DeleteByUID(ctx context.Context, c client.Writer, obj client.Object, opts ...client.DeleteOption) error {
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, append([]client.DeleteOption{client.Preconditions{UID: &uid}}, opts...)...)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
