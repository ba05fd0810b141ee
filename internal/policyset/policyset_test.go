package policyset

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// listReader is an API server's LIST of policies held in memory: each List returns
// the policies as they are when it is called, after release lets it go. The real
// API server is in the controller's envtest tests (TestPolicyAppliedJustBeforeCounts);
// here the order of a LIST and a policy write is what the test must control.
type listReader struct {
	mu       sync.Mutex
	policies []v1.ToolPolicy
	lists    atomic.Int32
	started  chan struct{} // receives when a ToolPolicy LIST starts
	release  chan struct{} // a ToolPolicy LIST returns when it receives
}

func (r *listReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	panic("policies are listed, never read one by one")
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	switch l := list.(type) {
	case *v1.ClusterToolPolicyList:
		return nil
	case *v1.ToolPolicyList:
		r.lists.Add(1)
		r.mu.Lock()
		l.Items = append([]v1.ToolPolicy(nil), r.policies...) // read when the LIST begins
		r.mu.Unlock()
		r.started <- struct{}{}
		<-r.release
		return nil
	}
	panic("unexpected list")
}

func (r *listReader) apply(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policies = append(r.policies, v1.ToolPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       v1.ToolPolicySpec{},
	})
}

func names(s Set) []string {
	var out []string
	for _, p := range s.Namespaced {
		out = append(out, p.Name)
	}
	return out
}

// TestLoadFreshNeverUsesAnEarlierList: a decision never takes a LIST that began
// before it read its intent, even one still in flight, because a policy applied
// between that LIST's start and the intent's creation would not count. Decisions
// that began before a LIST share it.
func TestLoadFreshNeverUsesAnEarlierList(t *testing.T) {
	r := &listReader{started: make(chan struct{}, 10), release: make(chan struct{})}
	c := NewCache()
	ctx := t.Context()

	// A LIST begins (for a decision that read its intent before now) and hangs.
	early := make(chan Set, 1)
	go func() {
		s, err := c.LoadFresh(ctx, r, "ns", time.Now())
		if err != nil {
			t.Error(err)
		}
		early <- s
	}()
	<-r.started

	// A policy is applied, then an intent is read: its decision must see the policy.
	r.apply("deny-all")
	read := time.Now()
	late := make(chan Set, 1)
	go func() {
		s, err := c.LoadFresh(ctx, r, "ns", read)
		if err != nil {
			t.Error(err)
		}
		late <- s
	}()
	select {
	case <-r.started: // it listed for itself
	case <-time.After(10 * time.Second):
		t.Fatal("the later decision waited for the earlier LIST instead of listing")
	}
	r.release <- struct{}{}
	r.release <- struct{}{}
	if got := names(<-early); len(got) != 0 {
		t.Errorf("the early LIST saw %v, a policy applied after it began", got)
	}
	if got := names(<-late); len(got) != 1 || got[0] != "deny-all" {
		t.Errorf("the decision after the policy was applied saw %v, want [deny-all]", got)
	}

	// Decisions that read their intents before a LIST began share it.
	before := time.Now()
	var wg sync.WaitGroup
	results := make([]Set, 5)
	listsBefore := r.lists.Load()
	go func() { <-r.started; close(r.release) }()
	for i := range results {
		wg.Go(func() {
			s, err := c.LoadFresh(ctx, r, "ns", before)
			if err != nil {
				t.Error(err)
			}
			results[i] = s
		})
	}
	wg.Wait()
	if n := r.lists.Load() - listsBefore; n != 1 {
		t.Errorf("5 concurrent decisions made %d LISTs, want 1 shared", n)
	}
	for i, s := range results {
		if got := names(s); len(got) != 1 || got[0] != "deny-all" {
			t.Errorf("decision %d saw %v", i, got)
		}
	}
}

// TestDeletedPoliciesAreForgotten: the compiled form of a policy that a LIST no
// longer returns is dropped, so the cache does not grow with every policy ever seen.
func TestDeletedPoliciesAreForgotten(t *testing.T) {
	r := &listReader{started: make(chan struct{}, 10), release: make(chan struct{})}
	close(r.release)
	c := NewCache()
	for _, name := range []string{"a", "b", "c"} {
		r.apply(name)
	}
	if _, err := c.Load(t.Context(), r, "ns"); err != nil {
		t.Fatal(err)
	}
	if n := c.Compiled(); n != 3 {
		t.Fatalf("compiled %d policies, want 3", n)
	}
	r.mu.Lock()
	r.policies = r.policies[:1]
	r.mu.Unlock()
	s, err := c.Load(t.Context(), r, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); len(got) != 1 || got[0] != "a" {
		t.Fatalf("loaded %v, want [a]", got)
	}
	if n := c.Compiled(); n != 1 {
		t.Errorf("compiled policies held after two were deleted: %d, want 1", n)
	}
}
