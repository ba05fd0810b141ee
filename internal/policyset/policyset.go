// Package policyset loads the policies in scope of a namespace (every
// ClusterToolPolicy and the namespace's ToolPolicies) and compiles them once per
// generation, for the controller and for kubectl toolgate replay alike.
package policyset

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
)

// Cache hands the compiled policies in scope of a namespace to the decision
// function; policy.Cache compiles each policy once per generation.
//
// Freshness: a decision must count every policy whose write completed before the
// call was proposed ("a policy applied a moment before an intent counts"). The
// controller's informer cache gives no such promise (the policy watch and the intent
// watch are separate streams), so policies are read with a consistent LIST from the
// API server that began after the caller read the intent (Load's notBefore): the
// intent existed by then, so every policy written before the intent was created is
// in that LIST. Concurrent decisions share one LIST per scope when it began late
// enough for each of them; a burst of calls costs a LIST per wave, not two per call.
type Cache struct {
	compiled *policy.Cache

	mu sync.Mutex
	// listings holds the newest LIST of each scope: "" for the ClusterToolPolicies,
	// else a namespace's ToolPolicies.
	listings map[string]*listing
	// listed names the policies each scope's last completed LIST returned, so that a
	// deleted policy's compiled form is dropped.
	listed map[string]map[string]bool
}

// listing is one LIST of a scope, shared by every Load it began late enough for.
type listing struct {
	began    time.Time
	done     chan struct{}
	policies []*policy.CompiledPolicy
	broken   []string
	// brokenResult are the broken policies with a rule of when: Result.
	brokenResult []string
	err          error
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{compiled: policy.NewCache(), listings: map[string]*listing{}, listed: map[string]map[string]bool{}}
}

// Set is the policies in scope of one namespace.
type Set struct {
	// Cluster and Namespaced are the compiled, usable policies, sorted by name.
	Cluster, Namespaced []*policy.CompiledPolicy
	// Broken names the policies in scope that do not compile ("Kind/name").
	Broken []string
	// BrokenResult names those of Broken with a rule of when: Result: the results
	// they would check cannot be (policy.CheckResult).
	BrokenResult []string
}

// Load lists the ClusterToolPolicies and the namespace's ToolPolicies as they are now
// and returns them compiled.
func (c *Cache) Load(ctx context.Context, r client.Reader, namespace string) (Set, error) {
	return c.LoadFresh(ctx, r, namespace, time.Now())
}

// LoadFresh returns the policies in scope of namespace as a LIST that began at or
// after notBefore read them: one in flight or just finished is shared, otherwise a
// new one is made. The two scopes are listed concurrently. The returned slices are
// shared with other callers and must not be modified.
func (c *Cache) LoadFresh(ctx context.Context, r client.Reader, namespace string, notBefore time.Time) (Set, error) {
	cluster := make(chan *listing, 1)
	go func() { cluster <- c.scope(ctx, r, "", notBefore) }()
	ns := c.scope(ctx, r, namespace, notBefore)
	cl := <-cluster
	if cl.err != nil {
		return Set{}, cl.err
	}
	if ns.err != nil {
		return Set{}, ns.err
	}
	return Set{
		Cluster: cl.policies, Namespaced: ns.policies,
		Broken:       append(append([]string(nil), cl.broken...), ns.broken...),
		BrokenResult: append(append([]string(nil), cl.brokenResult...), ns.brokenResult...),
	}, nil
}

// scope returns a listing of one scope that began at or after notBefore.
func (c *Cache) scope(ctx context.Context, r client.Reader, scope string, notBefore time.Time) *listing {
	c.mu.Lock()
	l := c.listings[scope]
	if l == nil || l.began.Before(notBefore) {
		l = &listing{began: time.Now(), done: make(chan struct{})}
		c.listings[scope] = l
		c.mu.Unlock()
		c.list(ctx, r, scope, l)
		close(l.done)
		return l
	}
	c.mu.Unlock()
	select {
	case <-l.done:
	case <-ctx.Done():
		return &listing{err: ctx.Err()}
	}
	if l.err != nil {
		// The shared LIST failed (perhaps its caller's context ended): this caller
		// lists for itself rather than take another's error.
		own := &listing{began: time.Now(), done: make(chan struct{})}
		c.list(ctx, r, scope, own)
		close(own.done)
		return own
	}
	return l
}

// list reads and compiles one scope into l, and forgets the compiled forms of the
// scope's policies that are gone.
func (c *Cache) list(ctx context.Context, r client.Reader, scope string, l *listing) {
	type item struct {
		name     string
		deleting bool
		result   bool
		compile  func() (*policy.CompiledPolicy, error)
	}
	var items []item
	kind := policy.KindToolPolicy
	if scope == "" {
		kind = policy.KindClusterToolPolicy
		var list v1.ClusterToolPolicyList
		if l.err = r.List(ctx, &list); l.err != nil {
			return
		}
		for i := range list.Items {
			p := &list.Items[i]
			items = append(items, item{p.Name, p.DeletionTimestamp != nil, hasResultRules(p.Spec), func() (*policy.CompiledPolicy, error) { return c.compiled.ClusterToolPolicy(p) }})
		}
	} else {
		var list v1.ToolPolicyList
		if l.err = r.List(ctx, &list, client.InNamespace(scope)); l.err != nil {
			return
		}
		for i := range list.Items {
			p := &list.Items[i]
			items = append(items, item{p.Name, p.DeletionTimestamp != nil, hasResultRules(p.Spec), func() (*policy.CompiledPolicy, error) { return c.compiled.ToolPolicy(p) }})
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })
	names := make(map[string]bool, len(items))
	for _, it := range items {
		names[it.name] = true
		if it.deleting {
			continue
		}
		compiled, err := it.compile()
		if err != nil {
			l.broken = append(l.broken, kind+"/"+it.name)
			if it.result {
				l.brokenResult = append(l.brokenResult, kind+"/"+it.name)
			}
			continue
		}
		l.policies = append(l.policies, compiled)
	}
	c.mu.Lock()
	for name := range c.listed[scope] {
		if !names[name] {
			c.compiled.Forget(kind, scope, name)
		}
	}
	c.listed[scope] = names
	c.mu.Unlock()
}

// Compiled is the number of compiled policies held.
func (c *Cache) Compiled() int {
	return c.compiled.Len()
}

// SplitID splits a policy's "Kind/name".
func SplitID(id string) (kind, name string, ok bool) {
	return strings.Cut(id, "/")
}

// hasResultRules says whether a policy has a rule of when: Result (written so, or
// spelled otherwise: a rule whose when is unknown may be one).
func hasResultRules(spec v1.ToolPolicySpec) bool {
	for _, r := range spec.Rules {
		switch r.When {
		case "", v1.WhenToolCall, v1.WhenCompletion:
		default:
			return true
		}
	}
	return false
}
