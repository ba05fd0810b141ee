package reliability

import (
	"context"
	"fmt"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// Recorder feeds a History from watches of one namespace: every version of every
// ToolIntent, Approval, Execution and Job the API server sends, deletions included.
type Recorder struct {
	mu      sync.Mutex
	history *History
	cache   cache.Cache
}

// StartRecorder watches ns with cfg until ctx ends, and returns once the watches
// have synced.
func StartRecorder(ctx context.Context, cfg *rest.Config, ns string) (*Recorder, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.NewScheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	r := &Recorder{history: NewHistory(), cache: c}
	for _, obj := range []client.Object{&v1.ToolIntent{}, &v1.Approval{}, &v1.Execution{}, &batchv1.Job{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    r.record,
			UpdateFunc: func(_, obj any) { r.record(obj) },
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				r.record(obj)
			},
		}); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the recorder's watches of %s did not sync", ns)
	}
	return r, nil
}

func (r *Recorder) record(obj any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := obj.(type) {
	case *v1.ToolIntent:
		r.history.Intent(o)
	case *v1.Approval:
		r.history.Approval(o)
	case *v1.Execution:
		r.history.Execution(o)
	case *batchv1.Job:
		r.history.Job(o)
	}
}

// Check checks the History recorded so far (see History.Check).
func (r *Recorder) Check() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.history.Check()
}

// Count says how many intents were seen, and how many of them have an observation.
func (r *Recorder) Count() (intents, observed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ih := range r.history.intents {
		intents++
		if ih.last.Status.Observation != nil {
			observed++
		}
	}
	return intents, observed
}

// Intents returns the last version the recorder saw of every intent, deleted
// ones included.
func (r *Recorder) Intents() []*v1.ToolIntent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*v1.ToolIntent, 0, len(r.history.intents))
	for _, ih := range r.history.intents {
		out = append(out, ih.last.DeepCopy())
	}
	return out
}
