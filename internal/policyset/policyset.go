// Package policyset loads the policies in scope of a namespace (every
// ClusterToolPolicy and the namespace's ToolPolicies) and compiles them once per
// generation, for the controller and for kubectl toolgate replay alike.
package policyset

import (
	"context"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// Cache hands the compiled policies in scope of a namespace to the decision
// function; policy.Cache compiles each policy once per generation.
type Cache struct {
	compiled *policy.Cache
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{compiled: policy.NewCache()}
}

// Set is the policies in scope of one namespace.
type Set struct {
	// Cluster and Namespaced are the compiled, usable policies, sorted by name.
	Cluster, Namespaced []*policy.CompiledPolicy
	// Broken names the policies in scope that do not compile ("Kind/name").
	Broken []string
}

// Load lists the ClusterToolPolicies and the namespace's ToolPolicies as they are now
// and returns them compiled.
func (c *Cache) Load(ctx context.Context, r client.Reader, namespace string) (Set, error) {
	var out Set
	var cluster v1.ClusterToolPolicyList
	if err := r.List(ctx, &cluster); err != nil {
		return out, err
	}
	var namespaced v1.ToolPolicyList
	if err := r.List(ctx, &namespaced, client.InNamespace(namespace)); err != nil {
		return out, err
	}
	sort.Slice(cluster.Items, func(i, j int) bool { return cluster.Items[i].Name < cluster.Items[j].Name })
	sort.Slice(namespaced.Items, func(i, j int) bool { return namespaced.Items[i].Name < namespaced.Items[j].Name })
	for i := range cluster.Items {
		p := &cluster.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		compiled, err := c.compiled.ClusterToolPolicy(p)
		if err != nil {
			out.Broken = append(out.Broken, policy.KindClusterToolPolicy+"/"+p.Name)
			continue
		}
		out.Cluster = append(out.Cluster, compiled)
	}
	for i := range namespaced.Items {
		p := &namespaced.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		compiled, err := c.compiled.ToolPolicy(p)
		if err != nil {
			out.Broken = append(out.Broken, policy.KindToolPolicy+"/"+p.Name)
			continue
		}
		out.Namespaced = append(out.Namespaced, compiled)
	}
	return out, nil
}

// SplitID splits a policy's "Kind/name".
func SplitID(id string) (kind, name string, ok bool) {
	return strings.Cut(id, "/")
}
