package policy

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Cache holds compiled policies so that each generation of a policy is compiled once,
// however many calls it decides. It is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

type cacheKey struct {
	kind, namespace, name string
}

type cacheEntry struct {
	uid        types.UID
	generation int64
	policy     *CompiledPolicy
	err        error
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{entries: map[cacheKey]cacheEntry{}}
}

// Get returns the compiled policy for this kind, namespace (empty for cluster
// policies), name, UID and generation, compiling it on first use. A policy that does
// not compile returns the same error every time until its generation changes. A new
// UID (the policy was deleted and recreated) or generation replaces the old entry.
func (c *Cache) Get(kind, namespace, name string, uid types.UID, generation int64, spec v1alpha1.ToolPolicySpec) (*CompiledPolicy, error) {
	key := cacheKey{kind: kind, namespace: namespace, name: name}
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && e.uid == uid && e.generation == generation {
		return e.policy, e.err
	}
	// Compile outside the lock; two racing compiles of one generation agree.
	p, err := Compile(kind, name, generation, spec)
	c.mu.Lock()
	c.entries[key] = cacheEntry{uid: uid, generation: generation, policy: p, err: err}
	c.mu.Unlock()
	return p, err
}

// ToolPolicy returns the compiled form of a ToolPolicy.
func (c *Cache) ToolPolicy(p *v1alpha1.ToolPolicy) (*CompiledPolicy, error) {
	return c.Get(KindToolPolicy, p.Namespace, p.Name, p.UID, p.Generation, p.Spec)
}

// ClusterToolPolicy returns the compiled form of a ClusterToolPolicy.
func (c *Cache) ClusterToolPolicy(p *v1alpha1.ClusterToolPolicy) (*CompiledPolicy, error) {
	return c.Get(KindClusterToolPolicy, "", p.Name, p.UID, p.Generation, p.Spec)
}

// Forget drops a deleted policy.
func (c *Cache) Forget(kind, namespace, name string) {
	c.mu.Lock()
	delete(c.entries, cacheKey{kind: kind, namespace: namespace, name: name})
	c.mu.Unlock()
}

// Len is the number of cached policies.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
